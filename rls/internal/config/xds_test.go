package config

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// refLoad loads a push of one resource as pushes loaded before LoadXDS:
// written as YAML by refWriter, then read by Load.
func refLoad(o Options, msg []byte) (*Config, error) {
	w := refWriter{max: o.maxBytes()}
	name, err := w.config(msg)
	if err != nil {
		return nil, fmt.Errorf("xDS resource 0 (%q): %w", name, err)
	}
	c, err := o.Load([]File{{Name: "xds:" + name, Data: w.b}})
	if err != nil {
		// The YAML's errors name its one line; a push's tree has none.
		return nil, errors.New(strings.Replace(err.Error(), "xds:"+name+":1: ", "xds:"+name+": ", 1))
	}
	return c, nil
}

// sameLoad fails unless LoadXDS and refLoad agree on msg: the same error,
// or Configs with the same rules.
func sameLoad(t *testing.T, msg []byte) {
	t.Helper()
	o := Options{MergeDomains: true}
	got, gotErr := o.LoadXDS([][]byte{msg})
	want, wantErr := refLoad(o, msg)
	switch {
	case (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error():
		t.Fatalf("LoadXDS: %v\nthe YAML's load: %v", gotErr, wantErr)
	case gotErr != nil:
		return
	case got.Len() != want.Len() || got.Domains() != want.Domains():
		t.Fatalf("LoadXDS: %d rules in %d domains; the YAML's load: %d in %d", got.Len(), got.Domains(), want.Len(), want.Domains())
	}
	for i := range got.Len() {
		if g, w := got.Rule(i), want.Rule(i); !reflect.DeepEqual(g, w) {
			t.Fatalf("rule %d: LoadXDS %+v, the YAML's load %+v", i, *g, *w)
		}
	}
}

// xdsSeeds are pushes of every shape: Envoy Gateway's, nesting, every
// field, and each error.
func xdsSeeds() [][]byte {
	rl := func(u rlsconf.RateLimitUnit, n uint32) *rlsconf.RateLimitPolicy {
		return &rlsconf.RateLimitPolicy{Unit: u, RequestsPerUnit: n}
	}
	eg := &rlsconf.RateLimitConfig{Name: "eg", Domain: "envoy-gateway/default/eg/http"}
	for i := range 3 {
		v := fmt.Sprintf("httproute/default/backend/rule/0/match/0/route-%d", i)
		eg.Descriptors = append(eg.Descriptors, &rlsconf.RateLimitDescriptor{Key: v, Value: v,
			Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "rule-0-match-0", RateLimit: rl(rlsconf.RateLimitUnit_MINUTE, uint32(10+i))}}})
	}
	every := &rlsconf.RateLimitConfig{Name: "every", Domain: "api", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "k", RateLimit: rl(rlsconf.RateLimitUnit_SECOND, 1), ShadowMode: true, DetailedMetric: true},
		{Key: "k", Value: "v*", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true, Name: "free"}},
		{Key: "quoted \"key\"\n", Value: "null", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 3, Name: "a",
			Replaces: []*rlsconf.RateLimitReplace{{Name: "b"}, {Name: "c"}}}},
		{Key: "ünïcode", Value: "true", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "x", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "y", RateLimit: rl(rlsconf.RateLimitUnit_DAY, 0)}}}}},
	}}
	bad := func(edit func(*rlsconf.RateLimitConfig)) *rlsconf.RateLimitConfig {
		c := proto.Clone(every).(*rlsconf.RateLimitConfig)
		edit(c)
		return c
	}
	var out [][]byte
	for _, c := range []*rlsconf.RateLimitConfig{eg, every,
		{Name: "empty", Domain: "d"},
		{Name: "no domain"},
		bad(func(c *rlsconf.RateLimitConfig) { c.Descriptors = append(c.Descriptors, c.Descriptors[0]) }),
		bad(func(c *rlsconf.RateLimitConfig) { c.Descriptors[0].Key = "" }),
		bad(func(c *rlsconf.RateLimitConfig) { c.Descriptors[0].RateLimit.Unit = rlsconf.RateLimitUnit_UNKNOWN }),
		bad(func(c *rlsconf.RateLimitConfig) { c.Descriptors[0].RateLimit.Unit = 9 }),
		bad(func(c *rlsconf.RateLimitConfig) { c.Descriptors[1].RateLimit.Unit = rlsconf.RateLimitUnit_DAY }),
		bad(func(c *rlsconf.RateLimitConfig) { c.Descriptors[2].RateLimit.Replaces[0].Name = "" }),
		bad(func(c *rlsconf.RateLimitConfig) { c.Descriptors[2].RateLimit.Replaces[0].Name = "a" }),
	} {
		b, err := proto.Marshal(c)
		if err != nil {
			panic(err)
		}
		out = append(out, b)
	}
	// quota_mode (7), metadata (8), an unknown field, bytes that do not
	// parse, and a rate_limit given twice.
	d := func(fields ...[]byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte("d")),
			3, protowire.BytesType), slices.Concat(fields...))
	}
	key := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte("k"))
	policy := protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), []byte{0x08, 0x01, 0x10, 0x05})
	out = append(out,
		d(key, policy, protowire.AppendVarint(protowire.AppendTag(nil, 7, protowire.VarintType), 1)),
		d(key, protowire.AppendBytes(protowire.AppendTag(nil, 8, protowire.BytesType), nil)),
		d(key, protowire.AppendVarint(protowire.AppendTag(nil, 12, protowire.VarintType), 1)),
		d(key, policy, policy),
		d(key, []byte{0x12, 0x05, 'v'}),
		d(key, []byte{0x12, 0x02, 0xff, 0xfe}),
	)
	return out
}

// TestLoadXDS: LoadXDS loads every seed push as the YAML that
// envoyproxy/ratelimit converts it to loads, with the same errors; two
// resources of one domain merge.
func TestLoadXDS(t *testing.T) {
	seeds := xdsSeeds()
	for _, msg := range seeds {
		sameLoad(t, msg)
	}
	for i, rules := range []int{3, 4} { // Envoy Gateway's, and every field
		if c, err := (Options{}).LoadXDS(seeds[i : i+1]); err != nil || c.Len() != rules {
			t.Fatalf("seed %d: %v; want %d rules", i, err, rules)
		}
	}
	a, _ := proto.Marshal(&rlsconf.RateLimitConfig{Name: "a", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1}}}})
	b, _ := proto.Marshal(&rlsconf.RateLimitConfig{Name: "b", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "j", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 2}}}})
	c, err := Options{MergeDomains: true}.LoadXDS([][]byte{a, b})
	if err != nil || c.Len() != 2 || c.Find("d", []Entry{{"j", ""}}).RequestsPerUnit != 2 {
		t.Fatalf("two resources of one domain: %v", err)
	}
	if _, err := (Options{}).LoadXDS([][]byte{a, b}); err == nil || !strings.Contains(err.Error(), "in another file too") {
		t.Fatalf("two resources of one domain without MergeDomains: %v", err)
	}
	if _, err := (Options{MaxBytes: 40}).LoadXDS([][]byte{a}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a push over MaxBytes: %v", err)
	}
}

// FuzzLoadXDS: no push makes LoadXDS panic, and each loads as its YAML
// does.
func FuzzLoadXDS(f *testing.F) {
	for _, msg := range xdsSeeds() {
		f.Add(msg)
	}
	f.Fuzz(func(t *testing.T, msg []byte) { sameLoad(t, msg) })
}

// refWriter writes a RateLimitConfig's YAML, in flow style, as
// envoyproxy/ratelimit converts one (ConfigXdsProtoToYaml): the
// reference that LoadXDS, which makes the tree that this YAML reads as
// without writing it, is held to (it was how pushes loaded before).
type refWriter struct {
	b    []byte
	max  int    // the most bytes b may hold
	pace func() // called after each descriptor
}

// str writes s as a YAML double-quoted scalar: as it is between quotes
// where it is printable ASCII with no quote or backslash (the names of
// routes and rules), escaped by strconv's Go syntax, which YAML's double
// quotes read alike, where not.
func (w *refWriter) str(s []byte) {
	for _, c := range s {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			w.b = strconv.AppendQuote(w.b, unsafe.String(unsafe.SliceData(s), len(s)))
			return
		}
	}
	w.b = append(append(append(w.b, '"'), s...), '"')
}

// errRefTooLarge is the error of a push whose YAML would pass the bound.
var errRefTooLarge = errors.New("the push's configuration is larger than FLOODGATE_CONFIG_MAX_BYTES allows")

// list writes a list's separator: its opening before the first item,
// a comma before the others.
func (w *refWriter) list(first bool, name string) {
	if first {
		w.b = append(append(w.b, name...), ": ["...)
	} else {
		w.b = append(w.b, ", "...)
	}
}

// config writes a RateLimitConfig's YAML, and returns its name. Each
// descriptor is written as it is read, with no list of them kept.
func (w *refWriter) config(msg []byte) (name string, err error) {
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
		return name, errRefTooLarge
	}
	return name, nil
}

// descriptor writes one RateLimitDescriptor: its children first, as they
// are read, then its own fields.
func (w *refWriter) descriptor(msg []byte, depth int) error {
	if len(w.b) > w.max {
		return errRefTooLarge
	}
	if maxDepth := min(DefaultMaxDepth, xdsMaxDepth); depth >= maxDepth {
		return fmt.Errorf("descriptors nested deeper than %d levels", maxDepth)
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
func (w *refWriter) policy(key, msg []byte) error {
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
		if unit < uint64(len(xdsUnits)) && xdsUnits[unit] != "" {
			w.b = append(w.b, xdsUnits[unit]...)
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
