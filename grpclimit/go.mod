module github.com/floodgate-go/floodgate/grpclimit

go 1.24.0

require (
	github.com/floodgate-go/floodgate v0.0.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20251029180050-ab9386a59fda
	google.golang.org/grpc v1.78.0
	google.golang.org/protobuf v1.36.10
)

require (
	github.com/puzpuzpuz/xsync/v4 v4.5.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/net v0.47.0 // indirect
	golang.org/x/sys v0.40.0 // indirect
	golang.org/x/text v0.31.0 // indirect
)

replace github.com/floodgate-go/floodgate => ../
