module github.com/floodgate-go/floodgate/redislimit

go 1.24.0

require (
	github.com/floodgate-go/floodgate v0.0.0
	github.com/puzpuzpuz/xsync/v4 v4.5.0
	github.com/redis/go-redis/v9 v9.22.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sys v0.40.0 // indirect
)

replace github.com/floodgate-go/floodgate => ../
