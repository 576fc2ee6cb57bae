package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/rls/internal/config"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// xdsSettings are CONFIG_TYPE=GRPC_XDS_SOTW's: where the configuration
// server is, who this service is to it, and how to reach it again, as
// envoyproxy/ratelimit reads them (CONFIG_GRPC_XDS_*, XDS_CLIENT_*).
type xdsSettings struct {
	url      string
	nodeID   string
	nodeMeta map[string]string
	headers  map[string]string
	tls      *xdsTLS // nil: plaintext
	backoff  backoff
	maxMsg   int // the most bytes gRPC reads of a push
	// loadTimeout bounds the time from a push's arrival to its answer:
	// a push not in force by then is NACKed, the configuration before
	// staying.
	loadTimeout time.Duration
}

// xdsTLS are the client's TLS files, and the name the server's
// certificate must carry (the URL's host when empty).
type xdsTLS struct {
	cert, key, ca, san string
}

// backoff is the wait between attempts to reach the server, as
// envoyproxy/ratelimit's (github.com/jpillora/backoff's) is: initial ×
// factor^attempt, at most max and at least initial, with jitter a
// random time between initial and that. With its defaults (10 s, 60 s,
// factor 0.5) every wait is 10 s.
type backoff struct {
	initial, max time.Duration
	factor       float64
	jitter       bool
}

// wait is the wait before attempt n (from 0).
func (b backoff) wait(n int) time.Duration {
	d := float64(b.initial) * math.Pow(b.factor, float64(n))
	if b.jitter {
		d = float64(b.initial) + rand.Float64()*(d-float64(b.initial))
	}
	return time.Duration(min(max(d, float64(b.initial)), float64(b.max)))
}

// readXDS reads the xDS settings.
func readXDS(getenv func(string) string, errs *[]error, warn func(string), boolean func(string, bool) bool, duration func(string, time.Duration) time.Duration,
	load rls.LoadOptions) *xdsSettings {
	fail := func(format string, args ...any) { *errs = append(*errs, fmt.Errorf(format, args...)) }
	str := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	x := &xdsSettings{url: str("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"), nodeID: str("CONFIG_GRPC_XDS_NODE_ID", "default"),
		nodeMeta: map[string]string{}, headers: map[string]string{}}
	// Node metadata: key=value pairs, separated by commas; as
	// envoyproxy/ratelimit, an entry without = is left out (said here).
	for _, e := range strings.Split(getenv("CONFIG_GRPC_XDS_NODE_METADATA"), ",") {
		if e == "" {
			continue
		}
		k, v, ok := strings.Cut(e, "=")
		if !ok {
			warn(fmt.Sprintf("CONFIG_GRPC_XDS_NODE_METADATA: %q has no =, and is left out of the node's metadata (key=value,key=value)", e))
			continue
		}
		x.nodeMeta[k] = v
	}
	// Headers: key:value pairs, separated by commas (envconfig's maps).
	for _, e := range strings.Split(getenv("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"), ",") {
		if e == "" {
			continue
		}
		k, v, ok := strings.Cut(e, ":")
		if !ok || k == "" {
			fail("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: %q is not key:value", e)
			continue
		}
		x.headers[strings.ToLower(k)] = v
	}
	if getenv("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL") != "" {
		duration("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", 0)
		warn("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL has no effect, as in envoyproxy/ratelimit: XDS_CLIENT_BACKOFF_* space the attempts to reach the server")
	}
	if boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS", false) {
		t := &xdsTLS{cert: getenv("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"), key: getenv("CONFIG_GRPC_XDS_CLIENT_TLS_KEY"),
			ca: getenv("CONFIG_GRPC_XDS_SERVER_TLS_CACERT"), san: getenv("CONFIG_GRPC_XDS_SERVER_TLS_SAN")}
		if (t.cert == "") != (t.key == "") {
			fail("CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY: give both, or neither")
		}
		x.tls = t
	} else {
		for _, n := range []string{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN"} {
			if getenv(n) != "" {
				warn(n + " is ignored: the configuration server is reached without TLS unless CONFIG_GRPC_XDS_SERVER_USE_TLS=true")
			}
		}
	}
	x.backoff = backoff{initial: duration("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", 10*time.Second),
		max: duration("XDS_CLIENT_BACKOFF_MAX_INTERVAL", 60*time.Second), jitter: boolean("XDS_CLIENT_BACKOFF_JITTER", true), factor: 0.5}
	if x.backoff.initial <= 0 || x.backoff.max < x.backoff.initial {
		fail("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=%s and XDS_CLIENT_BACKOFF_MAX_INTERVAL=%s: a wait above 0, and a most at least that", x.backoff.initial, x.backoff.max)
	}
	if v := getenv("XDS_CLIENT_BACKOFF_RANDOM_FACTOR"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0) || math.IsInf(f, 0) {
			fail("XDS_CLIENT_BACKOFF_RANDOM_FACTOR=%q: a number above 0 (each wait is the one before times it)", v)
		}
		x.backoff.factor = f
	}
	// A push gRPC reads is answered with the reason when it does not
	// load; one larger than maxMsg is not read, and is NACKed on the
	// next stream. FLOODGATE_CONFIG_MAX_BYTES is as many bytes as a push
	// may hold (its YAML is larger than its bytes), and not gRPC's 4 MiB
	// (envoyproxy/ratelimit's, and 25,000 of Envoy Gateway's rules).
	if x.maxMsg = load.MaxBytes; x.maxMsg == 0 {
		x.maxMsg = config.DefaultMaxBytes
	}
	if v := getenv("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"); v != "" && v != "0" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			fail("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES=%q: a whole number of bytes, 0 for FLOODGATE_CONFIG_MAX_BYTES", v)
		}
		x.maxMsg = n
	}
	if x.loadTimeout = duration("FLOODGATE_CONFIG_LOAD_TIMEOUT", defaultLoadTimeout); x.loadTimeout <= 0 {
		fail("FLOODGATE_CONFIG_LOAD_TIMEOUT=%q: a duration above 0, such as 8s (the longest a push may take to be in force)", getenv("FLOODGATE_CONFIG_LOAD_TIMEOUT"))
	}
	return x
}

// node is the xDS node this service is to the server.
func (x *xdsSettings) node() *corev3.Node {
	n := &corev3.Node{Id: x.nodeID}
	if len(x.nodeMeta) > 0 {
		fields := make(map[string]*structpb.Value, len(x.nodeMeta))
		for k, v := range x.nodeMeta {
			fields[k] = structpb.NewStringValue(v)
		}
		n.Metadata = &structpb.Struct{Fields: fields}
	}
	return n
}

// credentials are the transport's: TLS with the client's certificate
// and the server verified by the CA file (or the system's roots,
// without one), each read again when its files change, or plaintext.
func (x *xdsSettings) credentials(log *slog.Logger) (credentials.TransportCredentials, error) {
	if x.tls == nil {
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: x.tls.san}
	if x.tls.ca != "" {
		ca, err := newReloading([]string{x.tls.ca}, tlsCheckEvery, log, "the xDS server's CA", func() (*x509.CertPool, error) {
			pool, err := caPool(x.tls.ca)
			if err != nil {
				return nil, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_TLS_CACERT: %w", err)
			}
			return pool, nil
		})
		if err != nil {
			return nil, err
		}
		// The server's chain is verified below, by the CA as it is at
		// each handshake, and its name as crypto/tls would verify it:
		// RootCAs is read once, when the connection's config is made.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			return verifyServer(cs, ca.get(time.Now()))
		}
	}
	if x.tls.cert != "" {
		r, err := newReloading([]string{x.tls.cert, x.tls.key}, tlsCheckEvery, log, "the xDS client's certificate", func() (*tls.Certificate, error) {
			pair, err := tls.LoadX509KeyPair(x.tls.cert, x.tls.key)
			if err != nil {
				return nil, fmt.Errorf("CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY: %w", err)
			}
			return &pair, nil
		})
		if err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return r.get(time.Now()), nil }
	}
	return credentials.NewTLS(cfg), nil
}

// verifyServer verifies a server's chain by roots, and that it is for
// the name the client asked for, as crypto/tls does without
// InsecureSkipVerify.
func verifyServer(cs tls.ConnectionState, roots *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the xDS server showed no certificate")
	}
	opts := x509.VerifyOptions{Roots: roots, DNSName: cs.ServerName, Intermediates: x509.NewCertPool()}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(opts)
	return err
}

// xdsClient keeps the configuration that an xDS server pushes applied:
// each push, state of the world, replaces the whole configuration
// through apply, the path a file reload takes, and is ACKed once it is
// in force, or NACKed with the reason, the one before staying. Each
// push is answered within the settings' loadTimeout of its arrival
// (NACKed then, the load stopped), and one larger than maxMsg, which
// gRPC does not read, is NACKed on the next stream.
type xdsClient struct {
	set   *xdsSettings
	load  rls.LoadOptions
	log   *slog.Logger
	apply func(context.Context, *rls.Config, error) error
	node  *corev3.Node

	version string // the version in force, "" before the first

	refused      pushSum // the last push refused, to say so once
	refusedWhy   string
	refusedUntil time.Time // a refusal for time expires then: the push is loaded again

	tooLarge string    // why the last stream broke on a push too large to read, for the next to NACK
	nackedAt time.Time // when the next stream last NACKed one
}

// retryAfter is how long a push refused for the time it took stays
// refused, NACKed again without loading it again each time the server
// sends it, before it is loaded again when it comes.
const retryAfter = time.Minute

// run serves the stream until ctx ends, reaching the server again, after
// the backoff's wait, each time the stream breaks, or at once when it
// broke on a push too large to read (a second later when the one before
// did too), so as to NACK it. first, if not nil, is closed once a push
// is in force.
func (c *xdsClient) run(ctx context.Context, conn *grpc.ClientConn, first chan<- struct{}) {
	attempt := 0
	pushed := func(applied bool) { // a push came: the next break waits the least
		attempt = 0
		if applied && first != nil {
			close(first)
			first = nil
		}
	}
	for ; ; attempt++ {
		err := c.stream(ctx, conn, pushed)
		if ctx.Err() != nil {
			return
		}
		wait := c.set.backoff.wait(attempt)
		if c.tooLarge != "" {
			if wait = 0; time.Since(c.nackedAt) < 2*time.Second {
				wait = time.Second // the server sends it again at once: NACK it once a second, logged once
			} else {
				c.apply(ctx, nil, errors.New(c.tooLarge)) // counted, and logged, as a file that fails
			}
		} else {
			c.log.Warn("the xDS configuration stream broke: the configuration stays, and the server is asked again", "server", c.set.url, "err", err, "in", wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// adsStream is the ADS method, called as a stream of its own so that a
// push is read by xdsCodec.
var adsStream = &grpc.StreamDesc{StreamName: "StreamAggregatedResources", ServerStreams: true, ClientStreams: true}

const adsMethod = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"

// stream opens a stream and applies each push on it until it breaks,
// calling pushed after each push it received, with whether it is now in
// force. Its first request NACKs the push too large to read that broke
// the stream before, if one did.
func (c *xdsClient) stream(ctx context.Context, conn *grpc.ClientConn, pushed func(applied bool)) error {
	sctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, metadata.New(c.set.headers)))
	defer cancel() // ends the stream
	st, err := conn.NewStream(sctx, adsStream, adsMethod, grpc.ForceCodecV2(xdsCodec{}), grpc.MaxCallRecvMsgSize(c.set.maxMsg))
	if err != nil {
		return err
	}
	send := func(nonce, nack string) error {
		req := &discoveryv3.DiscoveryRequest{Node: c.node, VersionInfo: c.version, TypeUrl: resourcev3.RateLimitConfigType, ResponseNonce: nonce}
		if nack != "" {
			req.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: nack}
		}
		return st.SendMsg(req)
	}
	if err := send("", c.tooLarge); err != nil {
		return err
	}
	if c.tooLarge != "" {
		c.tooLarge, c.nackedAt = "", time.Now()
	}
	for {
		p := new(xdsPush)
		if err := st.RecvMsg(p); err != nil {
			if s, ok := status.FromError(err); ok && s.Code() == codes.ResourceExhausted && sctx.Err() == nil {
				c.tooLarge = fmt.Sprintf("a push too large to read: %s (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES, FLOODGATE_CONFIG_MAX_BYTES when unset)", s.Message())
			}
			return err
		}
		pushed(false)
		digest := pushDigest(p.resources)
		if digest == c.refused && (c.refusedUntil.IsZero() || time.Now().Before(c.refusedUntil)) {
			// The server sends a refused push again at once (go-control-
			// plane's cache answers a NACK with its snapshot, and sends
			// no other push before the answer): refuse it again a second
			// later, so that the two do not spin, without loading,
			// counting or logging it again.
			p.resources = nil
			select {
			case <-sctx.Done():
				return sctx.Err()
			case <-time.After(time.Second):
			}
			if err := send(p.nonce, c.refusedWhy); err != nil {
				return err
			}
			continue
		}
		// The push is answered within loadTimeout of now: its load and
		// swap count.
		timeout := fmt.Errorf("%w: %s (FLOODGATE_CONFIG_LOAD_TIMEOUT)", errLoadTimeout, c.set.loadTimeout)
		lctx, stop := context.WithTimeoutCause(sctx, c.set.loadTimeout, timeout)
		if testLoadContext != nil {
			stop()
			lctx, stop = testLoadContext(sctx, p.version, timeout)
		}
		err := c.push(lctx, p, digest, send)
		stop()
		switch {
		case err == errNacked:
		case err != nil:
			return err
		default:
			pushed(true)
		}
	}
}

// testLoadContext and testPace are the tests' seams, nil in the binary,
// and read by startXDS and each push. testLoadContext makes each push's
// context in place of its timeout: the test ends it, with the timeout's
// cause, when it chooses. testPace is called where a push's load paces
// itself (rls.LoadOptions.Pace), after the pacer.
var (
	testLoadContext func(parent context.Context, version string, timeout error) (context.Context, context.CancelFunc)
	testPace        func()
)

// errLoadTimeout is the cause, wrapped, of a load stopped by its
// deadline.
var errLoadTimeout = errors.New("the push was not in force within the time a push may take")

// errNacked is push's answer for a push refused, and NACKed.
var errNacked = errors.New("NACKed")

// push loads p, whose digest is digest, and puts it in force, and ACKs
// it through send, or NACKs it with the reason and returns errNacked;
// another error is send's.
func (c *xdsClient) push(ctx context.Context, p *xdsPush, digest pushSum, send func(nonce, nack string) error) error {
	// ended: the load stopped because the service stops, not for its
	// time; there is no one to answer.
	ended := func() bool { return ctx.Err() != nil && !errors.Is(context.Cause(ctx), errLoadTimeout) }
	cfg, err := loadXDS(ctx, c.load, p.resources)
	switch {
	case err != nil && ended():
		return ctx.Err()
	case err == nil:
		err = c.apply(ctx, cfg, nil)
	default:
		c.apply(ctx, nil, err) // counted, and logged, as a file that fails
	}
	if err != nil && ended() {
		return ctx.Err()
	}
	if err != nil {
		c.refused, c.refusedWhy, c.refusedUntil = digest, err.Error(), time.Time{}
		if errors.Is(err, errLoadTimeout) {
			c.refusedUntil = time.Now().Add(retryAfter)
		}
		if err := send(p.nonce, c.refusedWhy); err != nil {
			return err
		}
		return errNacked
	}
	c.refused, c.version = pushSum{}, p.version
	return send(p.nonce, "")
}

// loadXDS is the configuration of a push: every resource a
// RateLimitConfig, each loaded as one file would be
// (rls.LoadOptions.LoadXDS). An error past a bound names the
// setting that sets it.
func loadXDS(ctx context.Context, o rls.LoadOptions, resources []xdsResource) (*rls.Config, error) {
	msgs := make([][]byte, len(resources))
	for i, r := range resources {
		if r.typeURL != resourcev3.RateLimitConfigType {
			return nil, fmt.Errorf("xDS resource %d: type %q, not %s", i, r.typeURL, resourcev3.RateLimitConfigType)
		}
		msgs[i] = r.value
	}
	c, err := o.LoadXDS(ctx, msgs)
	return c, nameBound(err)
}

// pushSum tells pushes apart: two 64-bit hashes of a push, seeded at
// random by each process. A push is compared only with the last one
// refused, to refuse it again without loading it; a SHA-256 of a push of
// 100 MB cost a seventh of a second, this a fiftieth.
type pushSum [2]uint64

// pushSeeds are pushSum's seeds.
var pushSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// pushDigest is the pushSum of a push's resources.
func pushDigest(resources []xdsResource) (sum pushSum) {
	for i, seed := range pushSeeds {
		var h maphash.Hash
		h.SetSeed(seed)
		for _, r := range resources {
			fmt.Fprintf(&h, "%q %d\n", r.typeURL, len(r.value))
			h.Write(r.value)
		}
		sum[i] = h.Sum64()
	}
	return sum
}

// startXDS starts the xDS client, which applies each push through w,
// and returns what stops it (and returns once it has stopped: no call
// to the Server follows), and a channel closed once the first push is
// in force.
func startXDS(x *xdsSettings, w *watcher, log *slog.Logger) (stop func(), first <-chan struct{}, err error) {
	creds, err := x.credentials(log)
	if err != nil {
		return nil, nil, err
	}
	// Windows of 16 MiB: a push of 100 MB is read sooner than with the
	// windows gRPC grows on its own (2.1 s against 2.8 s from its sending
	// to its NACK, in one run of TestHeapBoundXDSPushes on a busy 2-core
	// machine), and no more is held: it is read as it comes.
	conn, err := grpc.NewClient(x.url, grpc.WithTransportCredentials(creds), grpc.WithInitialWindowSize(16<<20), grpc.WithInitialConnWindowSize(16<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_URL=%q: %w", x.url, err)
	}
	c := &xdsClient{set: x, load: w.load, log: log, apply: w.setContext, node: x.node()}
	if pace, test := c.load.Pace, testPace; test != nil {
		c.load.Pace = func() {
			if pace != nil {
				pace()
			}
			test()
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, ch := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		c.run(ctx, conn, ch)
	}()
	return func() {
		cancel()
		<-done
		conn.Close()
	}, ch, nil
}
