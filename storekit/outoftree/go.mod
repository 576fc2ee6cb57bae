module example.com/kitstore

go 1.24.0

require github.com/floodgate-go/floodgate v0.0.0

require (
	github.com/puzpuzpuz/xsync/v4 v4.5.0 // indirect
	golang.org/x/sys v0.40.0 // indirect
)

replace github.com/floodgate-go/floodgate => ../..
