package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/floodgate-go/floodgate/rls/config"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"
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
	maxMsg   int // 0: gRPC's default, 4 MiB
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
func readXDS(getenv func(string) string, errs *[]error, warn func(string), boolean func(string, bool) bool, duration func(string, time.Duration) time.Duration) *xdsSettings {
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
	if v := getenv("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			fail("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES=%q: a whole number of bytes, 0 for gRPC's 4 MiB", v)
		}
		x.maxMsg = n
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
// (read again when its files change) and the server verified by the CA
// file (or the system's roots, without one), or plaintext.
func (x *xdsSettings) credentials(log *slog.Logger) (credentials.TransportCredentials, error) {
	if x.tls == nil {
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: x.tls.san}
	if x.tls.ca != "" {
		pool, err := caPool(x.tls.ca)
		if err != nil {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_TLS_CACERT: %w", err)
		}
		cfg.RootCAs = pool
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

// xdsClient keeps the configuration that an xDS server pushes applied:
// each push, state of the world, replaces the whole configuration
// through apply, the path a file reload takes, and is ACKed once it is
// in force, or NACKed with the reason, the one before staying.
type xdsClient struct {
	set   *xdsSettings
	load  config.Options
	log   *slog.Logger
	apply func(*config.Config, error) error

	refused    [sha256.Size]byte // the last push refused, to say so once
	refusedWhy string
	scratch    []byte // the YAML of the last push loaded, whose buffer the next reuses
}

// run serves the stream until ctx ends, reaching the server again, after
// the backoff's wait, each time the stream breaks. first, if not nil, is
// closed once a push is in force.
func (c *xdsClient) run(ctx context.Context, conn *grpc.ClientConn, first chan<- struct{}) {
	sctx := metadata.NewOutgoingContext(ctx, metadata.New(c.set.headers))
	ads := sotw.NewADSClient(sctx, c.set.node(), resourcev3.RateLimitConfigType)
	attempt := 0
	pushed := func(applied bool) { // a push came: the next break waits the least
		attempt = 0
		if applied && first != nil {
			close(first)
			first = nil
		}
	}
	for ; ; attempt++ {
		err := c.stream(ctx, ads, conn, pushed)
		if ctx.Err() != nil {
			return
		}
		wait := c.set.backoff.wait(attempt)
		c.log.Warn("the xDS configuration stream broke: the configuration stays, and the server is asked again", "server", c.set.url, "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// stream opens a stream and applies each push on it until it breaks,
// calling pushed after each push it received, with whether it is now in
// force.
func (c *xdsClient) stream(ctx context.Context, ads sotw.ADSClient, conn *grpc.ClientConn, pushed func(applied bool)) error {
	var opts []grpc.CallOption
	if c.set.maxMsg > 0 {
		opts = append(opts, grpc.MaxCallRecvMsgSize(c.set.maxMsg))
	}
	if err := ads.InitConnect(conn, opts...); err != nil {
		return err
	}
	for {
		resp, err := ads.Fetch()
		if err != nil {
			return err
		}
		pushed(false)
		if digest := pushDigest(resp.Resources); digest == c.refused {
			// The server sends a refused push again at once (go-control-
			// plane's cache answers a NACK with its snapshot): refuse it
			// again after a little while, so that the two do not spin, and
			// without counting or logging it again.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
			if err := ads.Nack(c.refusedWhy); err != nil {
				return err
			}
			continue
		}
		cfg, err := loadXDS(c.load, resp.Resources, &c.scratch)
		if err == nil {
			err = c.apply(cfg, nil)
		} else {
			c.apply(nil, err) // counted, and logged, as a file that fails
		}
		if err != nil {
			c.refused, c.refusedWhy = pushDigest(resp.Resources), err.Error()
			if err := ads.Nack(c.refusedWhy); err != nil {
				return err
			}
			continue
		}
		c.refused = [sha256.Size]byte{}
		if err := ads.Ack(); err != nil {
			return err
		}
		pushed(true)
	}
}

// loadXDS is the configuration of a push: every resource a
// RateLimitConfig, each loaded as one file would be.
//
// A resource is read from its bytes as they came, not decoded into
// messages first: a descriptor costs a few bytes of YAML, where a decoded
// message costs over a hundred, so that a push costs a small multiple of
// its size. Every string must be UTF-8, as proto3's are; a field the
// RateLimitConfig of ratelimit/v0.1.0 does not have is an error, except
// quota_mode (7), which newer ones carry; a singular field given twice
// keeps its last value, as protobuf reads it, and a rate_limit given
// twice is an error (protobuf would merge the two).
func loadXDS(o config.Options, resources []*anypb.Any, scratch *[]byte) (*config.Config, error) {
	files := make([]config.File, 0, len(resources))
	maxBytes := o.MaxBytes
	if maxBytes <= 0 {
		maxBytes = config.DefaultMaxBytes
	}
	// Every resource's YAML is written into one buffer, which the next
	// push reuses once this one has loaded (a Config keeps none of its
	// files' bytes): a push allocates no text, and clears none.
	var b []byte
	if scratch != nil {
		b = (*scratch)[:0]
	}
	for i, r := range resources {
		if r.GetTypeUrl() != resourcev3.RateLimitConfigType {
			return nil, fmt.Errorf("xDS resource %d: type %q, not %s", i, r.GetTypeUrl(), resourcev3.RateLimitConfigType)
		}
		if b == nil {
			b = make([]byte, 0, min(maxBytes, len(r.GetValue()))+64)
		}
		start := len(b)
		w := xdsWriter{max: maxBytes, b: b, pace: o.Pace}
		name, err := w.config(r.GetValue())
		if err != nil {
			return nil, fmt.Errorf("xDS resource %d (%q): %w", i, name, err)
		}
		b = w.b
		files = append(files, config.File{Name: "xds:" + name, Data: b[start:]})
	}
	c, err := o.Load(files)
	if err == nil && scratch != nil {
		*scratch = b // the size of a configuration in force, whose rules cost more
	}
	return c, err
}

// pushDigest is a SHA-256 of a push's resources.
func pushDigest(resources []*anypb.Any) (sum [sha256.Size]byte) {
	h := sha256.New()
	for _, r := range resources {
		fmt.Fprintf(h, "%q %d\n", r.GetTypeUrl(), len(r.GetValue()))
		h.Write(r.GetValue())
	}
	h.Sum(sum[:0])
	return sum
}

// xdsUnits name the units by number: the types' enum ends at DAY, and
// the server may send the rest.
var xdsUnits = map[uint64]string{1: "second", 2: "minute", 3: "hour", 4: "day", 5: "month", 6: "year", 7: "week"}

// xdsMaxDepth bounds the descriptors' nesting that a push may hold: a
// tree deeper than any configuration has is refused before it is walked
// further.
const xdsMaxDepth = 64

// xdsWriter writes a RateLimitConfig's YAML, in flow style, as
// envoyproxy/ratelimit converts one (ConfigXdsProtoToYaml), so that a
// push loads as its file would.
type xdsWriter struct {
	b    []byte
	max  int    // the most bytes b may hold
	pace func() // called after each descriptor
}

// xdsField is one field of a message's bytes.
type xdsField struct {
	num  protowire.Number
	typ  protowire.Type
	v    uint64 // a varint's value
	data []byte // a length-delimited field's bytes
}

// xdsIter walks a message's fields in order, allocating nothing.
type xdsIter struct {
	msg []byte
	f   xdsField
	err error
}

// next moves to the next field, and reports whether there is one; at
// the end, err is set if the bytes did not parse.
func (it *xdsIter) next() bool {
	if len(it.msg) == 0 || it.err != nil {
		return false
	}
	num, typ, n := protowire.ConsumeTag(it.msg)
	if n < 0 {
		it.err = errors.New("the message's bytes do not parse")
		return false
	}
	it.msg = it.msg[n:]
	it.f = xdsField{num: num, typ: typ}
	switch typ {
	case protowire.VarintType:
		it.f.v, n = protowire.ConsumeVarint(it.msg)
	case protowire.BytesType:
		it.f.data, n = protowire.ConsumeBytes(it.msg)
	default:
		n = protowire.ConsumeFieldValue(num, typ, it.msg)
	}
	if n < 0 {
		it.err = errors.New("the message's bytes do not parse")
		return false
	}
	it.msg = it.msg[n:]
	return true
}

// want is the error of a field of the wrong wire type, or nil.
func (f *xdsField) want(typ protowire.Type, name string) error {
	if f.typ != typ {
		return fmt.Errorf("%s: wire type %d", name, f.typ)
	}
	return nil
}

// text is the error of a string field of the wrong wire type or not in
// UTF-8, or nil.
func (f *xdsField) text(name string) error {
	if err := f.want(protowire.BytesType, name); err != nil {
		return err
	}
	if !utf8.Valid(f.data) {
		return fmt.Errorf("%s: not UTF-8", name)
	}
	return nil
}

// str writes s as a YAML double-quoted scalar: as it is between quotes
// where it is printable ASCII with no quote or backslash (the names of
// routes and rules), escaped by strconv's Go syntax, which YAML's double
// quotes read alike, where not.
func (w *xdsWriter) str(s []byte) {
	for _, c := range s {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			w.b = strconv.AppendQuote(w.b, unsafe.String(unsafe.SliceData(s), len(s)))
			return
		}
	}
	w.b = append(append(append(w.b, '"'), s...), '"')
}

// errTooLarge is the error of a push whose YAML would pass the bound.
var errTooLarge = errors.New("the push's configuration is larger than FLOODGATE_CONFIG_MAX_BYTES allows")

// list writes a list's separator: its opening before the first item,
// a comma before the others.
func (w *xdsWriter) list(first bool, name string) {
	if first {
		w.b = append(append(w.b, name...), ": ["...)
	} else {
		w.b = append(w.b, ", "...)
	}
}

// config writes a RateLimitConfig's YAML, and returns its name. Each
// descriptor is written as it is read, with no list of them kept.
func (w *xdsWriter) config(msg []byte) (name string, err error) {
	var domain []byte
	w.b = append(w.b, '{')
	n := 0
	for it := (xdsIter{msg: msg}); ; {
		if !it.next() {
			if it.err != nil {
				return name, it.err
			}
			break
		}
		f := &it.f
		switch f.num {
		case 1:
			if err := f.text("name"); err != nil {
				return name, err
			}
			name = string(f.data)
		case 2:
			if err := f.text("domain"); err != nil {
				return name, err
			}
			domain = f.data
		case 3:
			if err := f.want(protowire.BytesType, "descriptors"); err != nil {
				return name, err
			}
			w.list(n == 0, "descriptors")
			n++
			if w.pace != nil {
				w.pace()
			}
			if err := w.descriptor(f.data, 0); err != nil {
				return name, err
			}
		default:
			return name, fmt.Errorf("the config: field %d is not known to floodgate-rls", f.num)
		}
	}
	if n > 0 {
		w.b = append(w.b, "], "...)
	}
	w.b = append(w.b, "domain: "...)
	w.str(domain)
	w.b = append(w.b, "}\n"...)
	if len(w.b) > w.max {
		return name, errTooLarge
	}
	return name, nil
}

// descriptor writes one RateLimitDescriptor: its children first, as they
// are read, then its own fields.
func (w *xdsWriter) descriptor(msg []byte, depth int) error {
	if len(w.b) > w.max {
		return errTooLarge
	}
	if depth >= xdsMaxDepth {
		return fmt.Errorf("descriptors nested deeper than %d levels", xdsMaxDepth)
	}
	var key, value, policy []byte
	var hasKey, hasPolicy bool
	var shadow, detailed, quota uint64
	if cap(w.b)-len(w.b) < 4<<10 {
		// Doubled (up to the bound), not by append's quarter for large
		// slices: a push's YAML is copied about once as it grows, not a
		// dozen times.
		w.b = slices.Grow(w.b, max(4<<10, min(len(w.b), w.max+4<<10-len(w.b))))
	}
	w.b = append(w.b, '{')
	n := 0
	for it := (xdsIter{msg: msg}); ; {
		if !it.next() {
			if it.err != nil {
				return it.err
			}
			break
		}
		f := &it.f
		var err error
		switch f.num {
		case 1:
			err, key, hasKey = f.text("key"), f.data, true
		case 2:
			err, value = f.text("value"), f.data
		case 3:
			if hasPolicy {
				return fmt.Errorf("descriptor %q: rate_limit appears twice", key)
			}
			err, policy, hasPolicy = f.want(protowire.BytesType, "rate_limit"), f.data, true
		case 4:
			if err = f.want(protowire.BytesType, "descriptors"); err == nil {
				w.list(n == 0, "descriptors")
				n++
				err = w.descriptor(f.data, depth+1)
			}
		case 5:
			err, shadow = f.want(protowire.VarintType, "shadow_mode"), f.v
		case 6:
			err, detailed = f.want(protowire.VarintType, "detailed_metric"), f.v
		case 7:
			err, quota = f.want(protowire.VarintType, "quota_mode"), f.v
		case 8:
			return fmt.Errorf("descriptor %q: metadata is not implemented by floodgate-rls", key)
		default:
			return fmt.Errorf("descriptor %q: field %d is not known to floodgate-rls", key, f.num)
		}
		if err != nil {
			return err
		}
	}
	if !hasKey || len(key) == 0 {
		return errors.New("a descriptor has an empty key")
	}
	if n > 0 {
		w.b = append(w.b, "], "...)
	}
	w.b = append(w.b, "key: "...)
	w.str(key)
	if len(value) > 0 {
		w.b = append(w.b, ", value: "...)
		w.str(value)
	}
	for _, flag := range [...]struct {
		name string
		v    uint64
	}{{"shadow_mode", shadow}, {"detailed_metric", detailed}, {"quota_mode", quota}} {
		if flag.v != 0 {
			w.b = append(append(append(w.b, ", "...), flag.name...), ": true"...)
		}
	}
	if hasPolicy {
		w.b = append(w.b, ", rate_limit: "...)
		if err := w.policy(key, policy); err != nil {
			return err
		}
	}
	w.b = append(w.b, '}')
	return nil
}

// policy writes a RateLimitPolicy.
func (w *xdsWriter) policy(key, msg []byte) error {
	var unit, rpu, unlimited uint64
	var name []byte
	w.b = append(w.b, '{')
	n := 0
	for it := (xdsIter{msg: msg}); ; {
		if !it.next() {
			if it.err != nil {
				return it.err
			}
			break
		}
		f := &it.f
		var err error
		switch f.num {
		case 1:
			err, unit = f.want(protowire.VarintType, "unit"), f.v
		case 2:
			err, rpu = f.want(protowire.VarintType, "requests_per_unit"), f.v
		case 3:
			err, unlimited = f.want(protowire.VarintType, "unlimited"), f.v
		case 4:
			err, name = f.text("name"), f.data
		case 5:
			if err = f.want(protowire.BytesType, "replaces"); err != nil {
				return err
			}
			var rn []byte
			for r := (xdsIter{msg: f.data}); r.next() || r.err != nil; {
				if r.err != nil {
					return r.err
				}
				if r.f.num != 1 {
					return fmt.Errorf("a replaces entry: field %d is not known to floodgate-rls", r.f.num)
				}
				if err := r.f.text("replaces name"); err != nil {
					return err
				}
				rn = r.f.data
			}
			w.list(n == 0, "replaces")
			n++
			w.b = append(w.b, "{name: "...)
			w.str(rn)
			w.b = append(w.b, '}')
		default:
			return fmt.Errorf("descriptor %q's rate_limit: field %d is not known to floodgate-rls", key, f.num)
		}
		if err != nil {
			return err
		}
	}
	if n > 0 {
		w.b = append(w.b, "], "...)
	}
	w.b = append(w.b, "requests_per_unit: "...)
	w.b = strconv.AppendUint(w.b, uint64(uint32(rpu)), 10) // a uint32 on the wire is its low 32 bits
	if unit = uint64(int32(unit)); unit != 0 {
		w.b = append(w.b, ", unit: "...)
		if u, ok := xdsUnits[unit]; ok {
			w.b = append(w.b, u...)
		} else {
			w.b = strconv.AppendQuote(w.b, strconv.FormatInt(int64(unit), 10)) // refused by the load, which names it
		}
	}
	if unlimited != 0 {
		w.b = append(w.b, ", unlimited: true"...)
	}
	if len(name) > 0 {
		w.b = append(w.b, ", name: "...)
		w.str(name)
	}
	w.b = append(w.b, '}')
	return nil
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
	conn, err := grpc.NewClient(x.url, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, nil, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_URL=%q: %w", x.url, err)
	}
	c := &xdsClient{set: x, load: w.load, log: log, apply: w.set}
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
