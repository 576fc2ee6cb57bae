package apitest

// WindowsOnly is not in the default build's files.
func WindowsOnly() {}
