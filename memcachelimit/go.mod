module github.com/floodgate-go/floodgate/memcachelimit

go 1.24.0

require (
	github.com/bradfitz/gomemcache v0.0.0-20260422231931-4d751bb6e37c
	github.com/floodgate-go/floodgate v0.0.0
)

require (
	github.com/puzpuzpuz/xsync/v4 v4.5.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sys v0.40.0 // indirect
)

replace github.com/floodgate-go/floodgate => ../
