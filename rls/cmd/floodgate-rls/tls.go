package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// tlsFiles are the gRPC server's TLS settings: its certificate and key,
// the CA files that verify clients (GRPC_CLIENT_TLS_CACERT, as
// envoyproxy/ratelimit reads it, and GRPC_SERVER_TLS_CA_CERT, as Envoy
// Gateway sets it), and the name a client's certificate must carry
// (GRPC_CLIENT_TLS_SAN).
type tlsFiles struct {
	cert, key string
	cas       []string
	san       string
}

// readGRPCTLS reads the gRPC server's TLS settings: nil, and a warning
// for each TLS file named, without GRPC_SERVER_USE_TLS=true.
func readGRPCTLS(getenv func(string) string, use bool, errs *[]error, warn func(string)) *tlsFiles {
	names := []string{"GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_SERVER_TLS_CA_CERT", "GRPC_CLIENT_TLS_SAN"}
	if !use {
		for _, n := range names {
			if getenv(n) != "" {
				warn(n + " is ignored: gRPC is served without TLS unless GRPC_SERVER_USE_TLS=true")
			}
		}
		return nil
	}
	f := &tlsFiles{cert: getenv("GRPC_SERVER_TLS_CERT"), key: getenv("GRPC_SERVER_TLS_KEY"), san: getenv("GRPC_CLIENT_TLS_SAN")}
	if f.cert == "" || f.key == "" {
		*errs = append(*errs, errors.New("GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"))
	}
	for _, n := range []string{"GRPC_CLIENT_TLS_CACERT", "GRPC_SERVER_TLS_CA_CERT"} {
		if v := getenv(n); v != "" {
			f.cas = append(f.cas, v)
		}
	}
	if f.san != "" && len(f.cas) == 0 {
		*errs = append(*errs, fmt.Errorf("GRPC_CLIENT_TLS_SAN=%q needs a CA to verify clients with: GRPC_CLIENT_TLS_CACERT or GRPC_SERVER_TLS_CA_CERT", f.san))
	}
	return f
}

// reloading is a value read from files, and read again when one of them
// changes: cert-manager and Envoy Gateway rotate certificates in place.
// A reader checks the files at most once per interval (a stat of each; a
// client that opens many connections costs no more), and a change is
// read whole before it replaces the value: until the files load
// together (a certificate with its key, every CA), readers get the one
// before. One reader checks at a time; the others go on with the value
// as it is.
type reloading[T any] struct {
	paths    []string
	interval time.Duration
	log      *slog.Logger
	what     string
	load     func() (*T, error)

	cur atomic.Pointer[T]

	mu      sync.Mutex // held by the one reader that checks the files
	checked time.Time  // when they were last checked
	stamps  []os.FileInfo
	failed  string // the last reload's error, logged once
}

// newReloading reads the files with load, and fails if they do not load.
func newReloading[T any](paths []string, interval time.Duration, log *slog.Logger, what string, load func() (*T, error)) (*reloading[T], error) {
	r := &reloading[T]{paths: paths, interval: interval, log: log, what: what, load: load}
	v, stamps, err := r.read()
	if err != nil {
		return nil, err
	}
	r.cur.Store(v)
	r.stamps, r.checked = stamps, time.Now()
	return r, nil
}

// read loads the value, with the files' stamps as they were before the
// reading: a change during it is seen by the next check.
func (r *reloading[T]) read() (*T, []os.FileInfo, error) {
	stamps, err := stat(r.paths)
	if err != nil {
		return nil, nil, err
	}
	v, err := r.load()
	return v, stamps, err
}

// get is the value now, read again first if the interval has passed
// since the last check and a file changed.
func (r *reloading[T]) get(now time.Time) *T {
	r.check(now)
	return r.cur.Load()
}

func (r *reloading[T]) check(now time.Time) {
	if !r.mu.TryLock() {
		return
	}
	defer r.mu.Unlock()
	if now.Sub(r.checked) < r.interval {
		return
	}
	r.checked = now
	stamps, err := stat(r.paths)
	if err == nil && !changed(r.stamps, stamps) {
		return
	}
	var v *T
	if err == nil {
		v, stamps, err = r.read()
	}
	if err != nil {
		if msg := err.Error(); msg != r.failed {
			r.failed = msg
			r.log.Error(r.what+": the files changed and do not load: the ones before stay", "err", err)
		}
		return
	}
	r.cur.Store(v)
	r.stamps, r.failed = stamps, ""
	r.log.Info(r.what+": the files changed, and are loaded again", "files", r.paths)
}

// stat is each file's FileInfo, following links (a Kubernetes volume
// swaps a link to a new directory).
func stat(paths []string) ([]os.FileInfo, error) {
	out := make([]os.FileInfo, len(paths))
	for i, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		out[i] = fi
	}
	return out, nil
}

// changed reports whether a file differs from its stamp: another file
// under the name, or another size or time.
func changed(was, now []os.FileInfo) bool {
	for i := range was {
		if !os.SameFile(was[i], now[i]) || was[i].Size() != now[i].Size() || !was[i].ModTime().Equal(now[i].ModTime()) {
			return true
		}
	}
	return false
}

// newServerTLS is the gRPC server's TLS configuration, read from f's
// files, and read again when they change (see reloading). A connection
// keeps the configuration it was made with, so a rotation drops no call.
// It fails if the files do not load.
func newServerTLS(f tlsFiles, interval time.Duration, log *slog.Logger) (*reloading[tls.Config], error) {
	paths := append([]string{f.cert, f.key}, f.cas...)
	return newReloading(paths, interval, log, "gRPC TLS", func() (*tls.Config, error) { return f.load() })
}

// load reads every file and builds the configuration.
func (f tlsFiles) load() (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		return nil, fmt.Errorf("GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	if len(f.cas) == 0 {
		return cfg, nil
	}
	pool, err := caPool(f.cas...)
	if err != nil {
		return nil, fmt.Errorf("the clients' CA: %w", err)
	}
	cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	if san := f.san; san != "" {
		cfg.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
			if len(chains) == 0 || len(chains[0]) == 0 {
				return errors.New("floodgate-rls: no verified client certificate")
			}
			if err := chains[0][0].VerifyHostname(san); err != nil {
				return fmt.Errorf("floodgate-rls: the client's certificate is not for GRPC_CLIENT_TLS_SAN: %w", err)
			}
			return nil
		}
	}
	return cfg, nil
}

// serverCreds is the configuration to give gRPC's credentials: every
// handshake gets the one in force (to which gRPC adds its ALPN protocol,
// h2).
func serverCreds(r *reloading[tls.Config]) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return r.get(time.Now()), nil
	}}
}

// caPool is a pool of the certificates in the PEM files at paths, each
// of which must hold one at least.
func caPool(paths ...string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	for _, p := range paths {
		pem, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate in it", p)
		}
	}
	return pool, nil
}
