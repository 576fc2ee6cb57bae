package apitest

// HelperOnly is in a test file.
func HelperOnly() {}
