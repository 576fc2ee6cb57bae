module github.com/floodgate-go/floodgate/bench

go 1.24

replace github.com/floodgate-go/floodgate => ../

require (
	github.com/puzpuzpuz/xsync/v3 v3.5.1
	github.com/puzpuzpuz/xsync/v4 v4.5.0
)
