module github.com/floodgate-go/floodgate

go 1.24.0

require (
	github.com/puzpuzpuz/xsync/v4 v4.5.0
	golang.org/x/sys v0.40.0
)

require go.uber.org/goleak v1.3.0
