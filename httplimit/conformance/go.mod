module github.com/floodgate-go/floodgate/httplimit/conformance

go 1.24.0

require (
	github.com/dunglas/httpsfv v1.1.2
	github.com/floodgate-go/floodgate v0.0.0
	github.com/go-chi/chi/v5 v5.5.0
	github.com/gorilla/mux v1.8.1
)

require (
	github.com/puzpuzpuz/xsync/v4 v4.5.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sys v0.40.0 // indirect
)

replace github.com/floodgate-go/floodgate => ../..
