package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/prommetrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on; port 0 picks a free one")
	limit := flag.Int64("limit", 5, "requests per period per client, for each endpoint")
	period := flag.Duration("period", time.Minute, "the period of -limit")
	trusted := flag.String("trusted-proxies", "", "comma-separated CIDRs of proxies whose X-Forwarded-For is believed")
	v6 := flag.Int("ipv6-prefix", 64, "IPv6 clients are grouped by this prefix length")
	metrics := flag.String("metrics", "", "address to serve GET /metrics on (Prometheus); empty for none")
	flag.Parse()
	if err := run(*addr, *limit, *period, *trusted, *v6, *metrics); err != nil {
		log.Fatal(err)
	}
}

func run(addr string, limit int64, period time.Duration, trusted string, v6 int, metricsAddr string) error {
	var proxies []string
	if trusted != "" {
		proxies = strings.Split(trusted, ",")
	}
	rule := floodgate.Rule{Limit: limit, Period: period}
	lim, err := httplimit.New(httplimit.Config{
		Routes: []httplimit.Route{
			{Pattern: "GET /hello", Policies: []httplimit.Policy{{Name: "hello", Rule: rule}}},
			{Pattern: "GET /other", Policies: []httplimit.Policy{{Name: "other", Rule: rule}}},
		},
		TrustedProxies: proxies,
		IPv6Prefix:     v6,
		// Both memory bounds, set here as a server should: clients idle a
		// minute are forgotten (which changes no decision), and each
		// policy holds at most a million (about 64 MiB), whatever a
		// client rotating its address or key sends.
		IdleTTL: time.Minute,
		MaxKeys: 1 << 20,
	})
	if err != nil {
		return err
	}
	defer lim.Close()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello, %s\n", lim.Client(r))
	})
	mux.HandleFunc("GET /other", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "other")
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer ln.Close() // on an error before Serve, which closes it
	srv := &http.Server{
		Handler: lim.Handler(mux),
		// A client that trickles its headers, or idles on a kept-alive
		// connection, holds a connection and a goroutine: bound both.
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	var msrv *http.Server
	var mln net.Listener
	if metricsAddr != "" {
		// The counts on a listener of their own, opened before either
		// line is printed, so that a bad -metrics is an error at start.
		c := prommetrics.New()
		if err := c.Add("httpserver", lim); err != nil {
			return err
		}
		reg := prometheus.NewRegistry()
		if err := reg.Register(c); err != nil {
			return err
		}
		if mln, err = net.Listen("tcp", metricsAddr); err != nil {
			return err
		}
		mmux := http.NewServeMux()
		mmux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		msrv = &http.Server{Handler: mmux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	}
	fmt.Printf("listening on %s\n", ln.Addr())
	errc := make(chan error, 2)
	if msrv != nil {
		fmt.Printf("metrics on %s\n", mln.Addr())
		go func() { errc <- msrv.Serve(mln) }()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(shutdown)
	if msrv != nil {
		err = errors.Join(err, msrv.Shutdown(shutdown))
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
