package config

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// api is a configuration in envoyproxy/ratelimit's schema, with every
// way a descriptor can match: a key alone, a key and value, wildcard
// values (trailing and inner), nesting, and floodgate's own keys.
const api = `domain: api
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: path
    value: /login
    rate_limit:
      unit: MINUTE
      requests_per_unit: 5
      algorithm: sliding_counter
  - key: path
    value: /files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 100
  - key: path
    value: /a*b*c
    rate_limit:
      unit: day
      requests_per_unit: 7
  - key: path
    value: /*
    rate_limit:
      unit: week
      requests_per_unit: 1000
  - key: path
    rate_limit:
      unit: month
      requests_per_unit: 20000
  - key: user
    descriptors:
      - key: plan
        value: gold
        rate_limit:
          name: gold
          unit: year
          requests_per_unit: 1000000
          algorithm: token_bucket
          burst: 50
          replaces:
            - name: everyone
      - key: plan
        shadow_mode: true
        detailed_metric: true
        rate_limit:
          name: everyone
          unit: second
          requests_per_unit: 0
  - key: health
    rate_limit:
      unlimited: true
`

func mustLoad(t *testing.T, files ...File) *Config {
	t.Helper()
	c, err := Load(files)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestFind: each descriptor gets the rule envoyproxy/ratelimit gives it:
// key_value first, then the level's wildcards in file order, then the key
// alone; a rule only at its own depth.
func TestFind(t *testing.T) {
	c := mustLoad(t, File{"api.yaml", []byte(api)})
	for _, tc := range []struct {
		domain  string
		entries []Entry
		want    string // the Limit's Key, or "" for none
	}{
		{"api", []Entry{{"remote_address", "10.0.0.1"}}, "api.remote_address"},
		{"api", []Entry{{"path", "/login"}}, "api.path_/login"},
		{"api", []Entry{{"path", "/files/x/y"}}, "api.path_/files/*"},
		{"api", []Entry{{"path", "/files/"}}, "api.path_/files/*"},
		{"api", []Entry{{"path", "/axxbyyc"}}, "api.path_/a*b*c"},
		{"api", []Entry{{"path", "/abc"}}, "api.path_/a*b*c"},
		{"api", []Entry{{"path", "/acb"}}, "api.path_/*"}, // b before c fails the inner wildcard
		{"api", []Entry{{"path", "/other"}}, "api.path_/*"},
		{"api", []Entry{{"path", "relative"}}, "api.path"}, // no wildcard matches: the key alone
		{"api", []Entry{{"path", ""}}, "api.path"},
		{"api", []Entry{{"user", "u1"}, {"plan", "gold"}}, "api.user.plan_gold"},
		{"api", []Entry{{"user", "u1"}, {"plan", "free"}}, "api.user.plan"},
		{"api", []Entry{{"user", "u1"}}, ""},                                   // no rule at the first level
		{"api", []Entry{{"remote_address", "x"}, {"plan", "gold"}}, ""},        // deeper than the rule
		{"api", []Entry{{"user", "u1"}, {"plan", "gold"}, {"extra", "1"}}, ""}, // deeper than any level
		{"api", []Entry{{"nope", "1"}}, ""},                                    // no such key
		{"other", []Entry{{"remote_address", "1"}}, ""},                        // no such domain
		{"api", nil, ""}, // no entries
		{"api", []Entry{{"health", "1"}}, "api.health"},
	} {
		l := c.Find(tc.domain, tc.entries)
		got := ""
		if l != nil {
			got = l.Key
		}
		if got != tc.want {
			t.Errorf("Find(%q, %v) = %q, want %q", tc.domain, tc.entries, got, tc.want)
		}
	}
}

// TestLimitFields: each rule carries its file's fields, and floodgate's
// defaults where the file is silent.
func TestLimitFields(t *testing.T) {
	c := mustLoad(t, File{"api.yaml", []byte(api)})
	login := c.Find("api", []Entry{{"path", "/login"}})
	if login.Unit != Minute || login.RequestsPerUnit != 5 || login.Algorithm != floodgate.SlidingCounter || login.Burst != 0 {
		t.Errorf("/login: %+v", login)
	}
	addr := c.Find("api", []Entry{{"remote_address", "a"}})
	if addr.Algorithm != floodgate.FixedWindow || addr.Unit != Second || addr.Shadow || addr.Unlimited {
		t.Errorf("remote_address: %+v", addr)
	}
	gold := c.Find("api", []Entry{{"user", "u"}, {"plan", "gold"}})
	if gold.Name != "gold" || gold.Unit != Year || gold.Algorithm != floodgate.TokenBucket || gold.Burst != 50 ||
		len(gold.Replaces) != 1 || gold.Replaces[0] != "everyone" {
		t.Errorf("gold: %+v", gold)
	}
	every := c.Find("api", []Entry{{"user", "u"}, {"plan", "x"}})
	if !every.Shadow || !every.Detailed || every.RequestsPerUnit != 0 || every.Name != "everyone" {
		t.Errorf("everyone: %+v", every)
	}
	if h := c.Find("api", []Entry{{"health", "1"}}); !h.Unlimited || h.Unit != 0 {
		t.Errorf("health: %+v", h)
	}
	if c.Domains() != 1 {
		t.Errorf("%d domains", c.Domains())
	}
}

// TestUnits: every unit by any case, its length as envoyproxy/ratelimit
// counts it, and its name.
func TestUnits(t *testing.T) {
	day := 24 * time.Hour
	for _, tc := range []struct {
		name string
		u    Unit
		d    time.Duration
	}{
		{"second", Second, time.Second}, {"Minute", Minute, time.Minute}, {"HOUR", Hour, time.Hour},
		{"day", Day, day}, {"week", Week, 7 * day}, {"month", Month, 30 * day}, {"year", Year, 365 * day},
	} {
		u, ok := ParseUnit(tc.name)
		if !ok || u != tc.u || u.Duration() != tc.d || !strings.EqualFold(u.String(), tc.name) {
			t.Errorf("%s: %v %v %v %v", tc.name, u, ok, u.Duration(), u.String())
		}
	}
	for _, bad := range []string{"", "unknown", "seconds", "fortnight"} {
		if _, ok := ParseUnit(bad); ok {
			t.Errorf("ParseUnit(%q) accepted", bad)
		}
	}
	if Unit(0).Duration() != 0 || Unit(0).String() != "UNKNOWN" {
		t.Error("the zero Unit is no unit")
	}
}

// TestLoadErrors: each mistake is an error naming the file and the line
// of what is wrong.
func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"empty file", "", "f.yaml: no domain"},
		{"bad yaml", "domain: [", "f.yaml:1: expected a string"},
		{"unknown key", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      burts: 3\n", `f.yaml:7: unknown key "burts"`},
		{"unknown top key", "domain: d\nextra: 1\n", `f.yaml:2: unknown key "extra"`},
		{"quota_mode as text", "domain: d\ndescriptors:\n  - key: k\n    quota_mode: sometimes\n", `f.yaml:4: expected true or false, not "sometimes"`},
		{"value_to_metric", "domain: d\ndescriptors:\n  - key: k\n    value_to_metric: true\n", "f.yaml:4: value_to_metric is not supported"},
		{"metadata", "domain: d\ndescriptors:\n  - key: k\n    metadata: {a: 1}\n", "f.yaml:4: metadata is not supported"},
		{"empty domain", "domain: \"\"\n", "f.yaml:1: the domain is empty"},
		{"no domain", "descriptors: []\n", "f.yaml:1: the domain is empty"},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", "f.yaml:3: a descriptor has an empty key"},
		{"duplicate descriptor", "domain: d\ndescriptors:\n  - key: k\n  - key: k\n", `f.yaml:4: descriptor "d.k" appears twice`},
		{"duplicate key in a map", "domain: d\ndomain: e\n", `f.yaml:2: key "domain" appears twice`},
		{"unknown unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n", `f.yaml:5: unknown unit "fortnight"`},
		{"no unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 1\n", `f.yaml:5: unknown unit ""`},
		{"unit and unlimited", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: second\n", "f.yaml:6: an unlimited rule has no unit"},
		{"unlimited with algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      algorithm: token_bucket\n", "f.yaml:5: an unlimited rule has no algorithm"},
		{"negative requests", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: -1\n", "f.yaml:6: requests_per_unit must be"},
		{"huge requests", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 4294967296\n", "f.yaml:6: requests_per_unit must be"},
		{"requests as text", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: ten\n", "f.yaml:6: requests_per_unit must be"},
		{"empty replaces", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: \"\"\n", "f.yaml:8: a replaces entry has no name"},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: a\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: a\n", "f.yaml:9: a rule cannot replace itself"},
		{"share_threshold without wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n", "f.yaml:3: share_threshold needs a wildcard"},
		{"share_threshold on a rule below a wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v*\n    descriptors:\n      - key: j\n        share_threshold: true\n        rate_limit: {unit: second, requests_per_unit: 1}\n", "f.yaml:6: share_threshold needs a wildcard"},
		{"unknown algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algorithm: gcra\n", `f.yaml:7: unknown algorithm "gcra"`},
		{"burst on a window", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      burst: 5\n", "f.yaml:7: burst is for token_bucket and leaky_bucket"},
		{"zero burst", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algorithm: token_bucket\n      burst: 0\n", "f.yaml:8: burst must be"},
		{"descriptors not a list", "domain: d\ndescriptors: {key: k}\n", "f.yaml:2: descriptors must be a list"},
		{"key as a map", "domain: d\ndescriptors:\n  - key: {a: b}\n", "f.yaml:3: expected a string"},
		{"flag as text", "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n", `f.yaml:4: expected true or false, not "maybe"`},
		{"descriptor as a string", "domain: d\ndescriptors:\n  - k\n", "f.yaml:3: expected a map"},
		{"root as a list", "- domain: d\n", "f.yaml:1: expected a map"},
	} {
		_, err := Load([]File{{"f.yaml", []byte(tc.yaml)}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	// A domain in two files is named at the second's line.
	_, err := Load([]File{{"a.yaml", []byte("domain: d\n")}, {"b.yaml", []byte("\ndomain: d\n")}})
	if err == nil || !strings.Contains(err.Error(), `b.yaml:2: domain "d" is in another file too`) {
		t.Errorf("duplicate domain: %v", err)
	}
}

// TestWildMatch: a * matches any run of characters, none included.
func TestWildMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"a*", "a", true}, {"a*", "abc", true}, {"a*", "b", false},
		{"*", "", true}, {"*", "x", true},
		{"a*c", "ac", true}, {"a*c", "abc", true}, {"a*c", "ab", false}, {"a*c", "a", false},
		{"a*b*c", "abc", true}, {"a*b*c", "axbxc", true}, {"a*b*c", "acb", false},
		{"ab*ba", "aba", false}, // the two fixed ends may not overlap
		{"exact", "exact", true}, {"exact", "exactly", false},
	} {
		if got := wildMatch(strings.Split(tc.pattern, "*"), tc.s); got != tc.want {
			t.Errorf("wildMatch(%q, %q) = %v", tc.pattern, tc.s, got)
		}
	}
}

// FuzzLoad: no file makes Load panic, and a config that loads answers
// any descriptor without panicking.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(api), "path", "/files/x", "plan", "gold")
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    value: \"*\"\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), "k", "", "", "")
	f.Add([]byte("domain: [\n"), "", "", "", "")
	f.Add([]byte("domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        value: \"**\"\n"), "a", "1", "b", "x")
	f.Fuzz(func(t *testing.T, data []byte, k1, v1, k2, v2 string) {
		c, err := Load([]File{{"f.yaml", data}})
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.yaml") {
				t.Fatalf("an error that names no file: %v", err)
			}
			return
		}
		for d := range c.domains {
			c.Find(d, []Entry{{k1, v1}})
			c.Find(d, []Entry{{k1, v1}, {k2, v2}})
		}
	})
}

// TestAppendKey: a rule counts each descriptor under its own values,
// except at a share_threshold wildcard, whose values all share one
// count; entries are length-prefixed, so values holding the separators
// of envoyproxy/ratelimit's keys ("_") never make two descriptors one.
func TestAppendKey(t *testing.T) {
	c := mustLoad(t, File{"api.yaml", []byte(api)})
	key := func(entries ...Entry) string {
		l, k := c.AppendKey([]byte("prefix:"), "api", entries)
		if l == nil {
			if string(k) != "prefix:" {
				t.Fatalf("%v: no rule, but the key grew to %q", entries, k)
			}
			return ""
		}
		return string(k)
	}
	if a, b := key(Entry{"path", "/files/a"}), key(Entry{"path", "/files/b/c"}); a != b || a == "" {
		t.Fatalf("share_threshold: /files/a counts under %q and /files/b/c under %q, want one key", a, b)
	}
	if a, b := key(Entry{"path", "/x"}), key(Entry{"path", "/y"}); a == b {
		t.Fatalf("a wildcard without share_threshold counts /x and /y together under %q", a)
	}
	if a, b := key(Entry{"user", "a_plan"}, Entry{"plan", "gold"}), key(Entry{"user", "a"}, Entry{"plan", "plan_gold"}); a == b && a != "" {
		t.Fatalf("two descriptors share the key %q through their separators", a)
	}
	if k := key(Entry{"user", "u1"}); k != "" {
		t.Fatalf("no rule at the first level, yet key %q", k)
	}
	if k := key(Entry{"user", "u1"}, Entry{"plan", "gold"}, Entry{"extra", "1"}); k != "" {
		t.Fatalf("deeper than any level, yet key %q", k)
	}
	long := strings.Repeat("x", 4096) // past the buffer a wildcard is matched in
	if l, _ := c.AppendKey(nil, "api", []Entry{{"path", "/files/" + long}}); l == nil || l.Key != "api.path_/files/*" {
		t.Fatalf("a 4 KiB value under a wildcard: %v", l)
	}
	buf := make([]byte, 0, 1024)
	entries := []Entry{{"user", strings.Repeat("u", 100)}, {"plan", strings.Repeat("p", 300)}}
	if a := testing.AllocsPerRun(100, func() { c.AppendKey(buf[:0], "api", entries) }); a != 0 {
		t.Fatalf("AppendKey allocates %v times a call, want 0", a)
	}
}

// TestSame: after a reload, each rule is found again at its place in the
// tree, whatever its new limit and its new order; a rule whose place is
// gone, or new, has no counterpart. Index numbers the rules densely.
func TestSame(t *testing.T) {
	old := mustLoad(t, File{"a.yaml", []byte(api)})
	changed := strings.Replace(api, "requests_per_unit: 10\n", "requests_per_unit: 11\n", 1)
	changed = strings.Replace(changed, "value: /login", "value: /signin", 1)
	next := mustLoad(t, File{"a.yaml", []byte(changed)})
	if old.Len() != 9 || next.Len() != 9 {
		t.Fatalf("Len: %d and %d, want 9 each", old.Len(), next.Len())
	}
	for i := range old.Len() {
		if r := old.Rule(i); r.Index != i {
			t.Fatalf("Rule(%d).Index = %d", i, r.Index)
		}
	}
	ra := old.Find("api", []Entry{{"remote_address", "x"}})
	if s := next.Same(ra); s == nil || s.RequestsPerUnit != 11 || s.Key != ra.Key {
		t.Fatalf("remote_address after the reload: %+v", s)
	}
	if s := next.Same(old.Find("api", []Entry{{"path", "/login"}})); s != nil {
		t.Fatalf("/login is gone, yet Same found %+v", s)
	}
	if s := next.Same(old.Find("api", []Entry{{"user", "u"}, {"plan", "gold"}})); s == nil || s.Name != "gold" {
		t.Fatalf("user.plan_gold after the reload: %+v", s)
	}
}

// TestPath: a rule's place, from its domain down, as configured.
func TestPath(t *testing.T) {
	c := mustLoad(t, File{"a.yaml", []byte(api)})
	d, levels := c.Find("api", []Entry{{"user", "u"}, {"plan", "gold"}}).Path()
	if d != "api" || strings.Join(levels, "|") != "user|plan_gold" {
		t.Fatalf("Path: %q %q", d, levels)
	}
	if d, levels := (&Limit{}).Path(); d != "" || levels != nil {
		t.Fatalf("a Limit of no Config: %q %q", d, levels)
	}
	l := c.Find("api", []Entry{{"user", "u"}, {"plan", "gold"}})
	if l.Level(0) != "user" || l.Level(1) != "plan_gold" || l.Level(2) != "" || (&Limit{}).Level(0) != "" {
		t.Fatalf("Level: %q %q %q", l.Level(0), l.Level(1), l.Level(2))
	}
	if n := testing.AllocsPerRun(100, func() { _ = l.Level(1) }); n != 0 {
		t.Fatalf("Level allocates %v times", n)
	}
}

// TestFields: CutField takes back, field by field, what AppendField
// wrote, and refuses what it did not.
func TestFields(t *testing.T) {
	key := string(AppendField(AppendField(nil, "a_b"), ""))
	f, rest, ok := CutField(key)
	g, rest2, ok2 := CutField(rest)
	if !ok || f != "a_b" || !ok2 || g != "" || rest2 != "" {
		t.Fatalf("CutField: %q %q %v, %q %q %v", f, rest, ok, g, rest2, ok2)
	}
	for _, bad := range []string{"", "\x05ab", "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"} {
		if _, rest, ok := CutField(bad); ok || rest != bad {
			t.Fatalf("CutField(%q): ok %v, rest %q", bad, ok, rest)
		}
	}
}

// TestMergeDomains: with MergeDomains, a domain in two files gets both
// files' descriptors; a descriptor at a place that the other file holds
// is an error that names it, as within a file. Without it, the second
// file is an error. Watch loads as its Options say.
func TestMergeDomains(t *testing.T) {
	a := File{"a.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")}
	b := File{"b.yaml", []byte("domain: d\ndescriptors:\n  - key: j\n    descriptors:\n      - key: n\n        rate_limit: {unit: hour, requests_per_unit: 2}\n")}
	if _, err := Load([]File{a, b}); err == nil || !strings.Contains(err.Error(), "b.yaml:1") || !strings.Contains(err.Error(), "MERGE_DOMAIN_CONFIG") {
		t.Fatalf("a domain in two files, not merged: %v", err)
	}
	c, err := Options{MergeDomains: true}.Load([]File{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if c.Domains() != 1 || c.Len() != 2 {
		t.Fatalf("merged: %d domains, %d rules; want 1 and 2", c.Domains(), c.Len())
	}
	if l := c.Find("d", []Entry{{"k", "x"}}); l == nil || l.Key != "d.k" || l.RequestsPerUnit != 1 {
		t.Errorf("the first file's rule: %+v", l)
	}
	if l := c.Find("d", []Entry{{"j", "x"}, {"n", "y"}}); l == nil || l.Key != "d.j.n" || l.Unit != Hour {
		t.Errorf("the second file's rule: %+v", l)
	}
	again := File{"c.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")}
	if _, err := (Options{MergeDomains: true}).Load([]File{a, again}); err == nil || !strings.Contains(err.Error(), `c.yaml:3: descriptor "d.k" appears twice`) {
		t.Errorf("a place in both files: %v", err)
	}

	dir := t.TempDir()
	for _, f := range []File{a, b} {
		if err := os.WriteFile(filepath.Join(dir, f.Name), f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, merge := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		ticks := make(chan time.Time)
		got := make(chan error, 1)
		go Options{MergeDomains: merge}.Watch(ctx, dir, false, ticks, func(_ *Config, err error) {
			select {
			case got <- err:
			default:
			}
		})
		if err := <-got; (err == nil) != merge {
			t.Errorf("Watch with MergeDomains %v: %v", merge, err)
		}
		cancel()
	}
}

// TestQuotaMode: quota_mode is read beside shadow_mode, from a file and
// in flow style.
func TestQuotaMode(t *testing.T) {
	c := mustLoad(t, File{"q.yaml", []byte("domain: q\ndescriptors:\n  - key: k\n    quota_mode: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - {key: s, shadow_mode: true, quota_mode: false, rate_limit: {unit: second, requests_per_unit: 1}}\n")})
	if l := c.Find("q", []Entry{{"k", "x"}}); l == nil || !l.Quota || l.Shadow {
		t.Errorf("k: %+v, want quota_mode alone", l)
	}
	if l := c.Find("q", []Entry{{"s", "x"}}); l == nil || l.Quota || !l.Shadow {
		t.Errorf("s: %+v, want shadow_mode alone", l)
	}
}
