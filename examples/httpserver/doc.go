// Command httpserver is a small HTTP server behind floodgate's httplimit
// middleware: GET /hello and GET /other each allow every client -limit
// requests per -period, counted apart.
//
//	httpserver -addr 127.0.0.1:8080 -limit 5 -period 1m -metrics 127.0.0.1:9090
//
// Once it listens it prints exactly one line to standard output,
// "listening on HOST:PORT", and with -metrics a second one, "metrics on
// HOST:PORT", where GET /metrics serves the middleware's counts in
// Prometheus's format (package prommetrics), on a listener of its own so
// that clients of the server never reach it. With port 0 it picks a free
// port. It logs to standard error, and stops on SIGINT or SIGTERM.
//
// It sets both of the middleware's memory bounds (MaxKeys and IdleTTL),
// and ReadHeaderTimeout and IdleTimeout on its server, explicitly.
// -trusted-proxies (comma-separated CIDRs) and -ipv6-prefix set the
// middleware's client identity. It is in a module of its own, so that
// floodgate's core module never requires client_golang.
package main
