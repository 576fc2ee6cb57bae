// Command tool is a main package: no line.
package main

// Exported is in a main package.
func Exported() {}

func main() {}
