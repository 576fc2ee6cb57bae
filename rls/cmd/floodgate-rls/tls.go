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

// serverTLS is the gRPC server's TLS configuration, read from its files,
// and read again when one of them changes: cert-manager and Envoy
// Gateway rotate certificates in place. A handshake checks the files at
// most once per interval (a stat of each; a client that opens many
// connections costs no more), and a change is read whole before it
// replaces the configuration: until the new files load together (a
// certificate with its key, every CA), new connections get the old one.
// A connection keeps the configuration it was made with, so a rotation
// drops no call.
type serverTLS struct {
	files    tlsFiles
	interval time.Duration
	log      *slog.Logger

	cfg atomic.Pointer[tls.Config]

	mu      sync.Mutex // held by the one handshake that checks the files
	checked time.Time  // when they were last checked
	stamps  []os.FileInfo
	failed  string // the last reload's error, logged once
}

// newServerTLS reads the files, and fails if they do not load.
func newServerTLS(f tlsFiles, interval time.Duration, log *slog.Logger) (*serverTLS, error) {
	s := &serverTLS{files: f, interval: interval, log: log}
	cfg, stamps, err := s.load()
	if err != nil {
		return nil, err
	}
	s.cfg.Store(cfg)
	s.stamps, s.checked = stamps, time.Now()
	return s, nil
}

// paths are the files the configuration is read from.
func (s *serverTLS) paths() []string {
	return append([]string{s.files.cert, s.files.key}, s.files.cas...)
}

// load reads every file and builds the configuration, with the files'
// stamps as they were before the reading: a change during it is seen by
// the next check.
func (s *serverTLS) load() (*tls.Config, []os.FileInfo, error) {
	stamps, err := stat(s.paths())
	if err != nil {
		return nil, nil, err
	}
	pair, err := tls.LoadX509KeyPair(s.files.cert, s.files.key)
	if err != nil {
		return nil, nil, fmt.Errorf("GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY: %w", err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{pair},
	}
	if len(s.files.cas) > 0 {
		pool := x509.NewCertPool()
		for _, ca := range s.files.cas {
			pem, err := os.ReadFile(ca)
			if err != nil {
				return nil, nil, fmt.Errorf("the clients' CA: %w", err)
			}
			if !pool.AppendCertsFromPEM(pem) {
				return nil, nil, fmt.Errorf("the clients' CA %s: no PEM certificate in it", ca)
			}
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
		if san := s.files.san; san != "" {
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
	}
	return cfg, stamps, nil
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

// config is tls.Config's GetConfigForClient: the configuration now,
// read again first if its files changed.
func (s *serverTLS) config(*tls.ClientHelloInfo) (*tls.Config, error) {
	s.check(time.Now())
	return s.cfg.Load(), nil
}

// check reads the files again if the interval has passed since the last
// check and one of them changed. One handshake checks; the others go on
// with the configuration as it is.
func (s *serverTLS) check(now time.Time) {
	if !s.mu.TryLock() {
		return
	}
	defer s.mu.Unlock()
	if now.Sub(s.checked) < s.interval {
		return
	}
	s.checked = now
	stamps, err := stat(s.paths())
	if err == nil && !changed(s.stamps, stamps) {
		return
	}
	var cfg *tls.Config
	if err == nil {
		cfg, stamps, err = s.load()
	}
	if err != nil {
		if msg := err.Error(); msg != s.failed {
			s.failed = msg
			s.log.Error("gRPC TLS files changed and do not load: the ones before stay", "err", err)
		}
		return
	}
	s.cfg.Store(cfg)
	s.stamps, s.failed = stamps, ""
	s.log.Info("gRPC TLS files loaded again", "cert", s.files.cert)
}

// base is the configuration to give gRPC's credentials: every handshake
// gets the one in force (to which gRPC adds its ALPN protocol, h2).
func (s *serverTLS) base() *tls.Config {
	return &tls.Config{GetConfigForClient: s.config, MinVersion: tls.VersionTLS12}
}
