module github.com/floodgate-go/floodgate/examples

go 1.26.0

replace (
	github.com/floodgate-go/floodgate => ../
	github.com/floodgate-go/floodgate/grpclimit => ../grpclimit
	github.com/floodgate-go/floodgate/memcachelimit => ../memcachelimit
	github.com/floodgate-go/floodgate/prommetrics => ../prommetrics
	github.com/floodgate-go/floodgate/redislimit => ../redislimit
)

require (
	github.com/bradfitz/gomemcache v0.0.0-20260422231931-4d751bb6e37c
	github.com/floodgate-go/floodgate v0.0.0
	github.com/floodgate-go/floodgate/grpclimit v0.0.0
	github.com/floodgate-go/floodgate/memcachelimit v0.0.0
	github.com/floodgate-go/floodgate/prommetrics v0.0.0
	github.com/floodgate-go/floodgate/redislimit v0.0.0
	github.com/prometheus/client_golang v1.25.0
	github.com/redis/go-redis/v9 v9.22.0
	go.uber.org/goleak v1.3.0
	google.golang.org/grpc v1.78.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/pandatix/go-abnf v0.5.5 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.74.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/puzpuzpuz/xsync/v4 v4.5.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20251029180050-ab9386a59fda // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
