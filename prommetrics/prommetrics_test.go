package prommetrics_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/internal/countinfo"
	"github.com/floodgate-go/floodgate/prommetrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The keys of the clients in the known sequence: none may appear in a
// scrape.
const keyA, keyB, keyC = "client-a-5f1e", "client-b-93c0", "client-c-d27a"

// coreLimiter is a floodgate.Limiter after the known sequence of
// floodgate's TestAppendCounts: a allowed twice and denied by its own
// rule, b allowed by the global cap's third unit, c denied by the cap;
// MaxKeys 1 evicts a and b spent (bound).
func coreLimiter(t *testing.T) *floodgate.Limiter {
	t.Helper()
	l, err := floodgate.New(floodgate.Config{
		Rule:   floodgate.Rule{Limit: 2, Period: time.Second},
		Global: &floodgate.Rule{Limit: 3, Period: time.Hour},
		Clock:  floodgate.NewManualClock(0), Stats: true, MaxKeys: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	for _, k := range []string{keyA, keyA, keyA, keyB, keyC} {
		l.Allow(k)
	}
	return l
}

// coreWant is what coreLimiter reports, under the limiter name "core".
var coreWant = map[string]float64{
	`floodgate_requests_total{limiter="core",policy="",result="allowed",route=""}`:       3,
	`floodgate_requests_total{limiter="core",policy="",result="denied",route=""}`:        1,
	`floodgate_requests_total{limiter="core",policy="",result="denied_global",route=""}`: 1,
	`floodgate_keys{limiter="core",policy="",route=""}`:                                  1,
	`floodgate_keys_max{limiter="core",policy="",route=""}`:                              1,
	`floodgate_evictions_total{limiter="core",policy="",reason="idle",route=""}`:         0,
	`floodgate_evictions_total{limiter="core",policy="",reason="bound",route=""}`:        2,
	`floodgate_evictions_total{limiter="core",policy="",reason="fresh",route=""}`:        0,
}

// httpLimiter is an httplimit middleware, served on a real loopback
// server, after three requests to GET /hello (two allowed, the third
// refused by its policy "hourly") and one to a path of the Default's.
func httpLimiter(t *testing.T) *httplimit.Limiter {
	t.Helper()
	store := floodgate.NewLocalStore(floodgate.LocalStoreConfig{Clock: floodgate.NewManualClock(0), MaxKeys: 100, IdleTTL: floodgate.Never})
	t.Cleanup(func() { store.Close() })
	l, err := httplimit.New(httplimit.Config{
		Routes: []httplimit.Route{{Pattern: "GET /hello",
			Policies: []httplimit.Policy{{Name: "hourly", Rule: floodgate.Rule{Limit: 2, Period: time.Hour}}}}},
		Default: []httplimit.Policy{{Name: "fallback", Rule: floodgate.Rule{Limit: 5, Period: time.Hour}}},
		Store:   store,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	srv := httptest.NewServer(l.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	for i, tc := range []struct {
		path   string
		status int
	}{{"/hello", 200}, {"/hello", 200}, {"/hello", 429}, {"/elsewhere", 200}} {
		resp, err := srv.Client().Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Fatalf("request %d to %s: %d, want %d", i, tc.path, resp.StatusCode, tc.status)
		}
	}
	srv.Client().CloseIdleConnections()
	return l
}

// httpWant is what httpLimiter reports, under the limiter name "http".
var httpWant = func() map[string]float64 {
	m := map[string]float64{}
	for _, r := range []struct {
		route, policy            string
		allowed, denied, maxKeys float64
	}{{"GET /hello", "hourly", 2, 1, 100}, {"default", "fallback", 1, 0, 100}} {
		at := func(name, policy, more string) string {
			return fmt.Sprintf(`%s{limiter="http",policy=%q,%sroute=%q}`, name, policy, more, r.route)
		}
		m[at("floodgate_requests_total", "", `result="allowed",`)] = r.allowed
		m[at("floodgate_requests_total", "", `result="exempt",`)] = 0
		m[at("floodgate_requests_total", r.policy, `result="denied",`)] = r.denied
		m[at("floodgate_requests_total", r.policy, `result="shadow_denied",`)] = 0
		m[at("floodgate_keys", r.policy, "")] = 1
		m[at("floodgate_keys_max", r.policy, "")] = r.maxKeys
		for _, reason := range []string{"idle", "bound", "fresh"} {
			m[at("floodgate_evictions_total", r.policy, `reason="`+reason+`",`)] = 0
		}
	}
	return m
}()

// scrape GETs url over HTTP and parses the text format into the series'
// values (by name{labels}, labels sorted) and the families.
func scrape(t *testing.T, url string) (map[string]float64, map[string]*dto.MetricFamily, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d: %s", url, resp.StatusCode, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parsing the scrape: %v\n%s", err, body)
	}
	return series(fams), fams, string(body)
}

func series(fams map[string]*dto.MetricFamily) map[string]float64 {
	got := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			slices.Sort(labels)
			v := m.GetGauge().GetValue()
			if f.GetType() == dto.MetricType_COUNTER {
				v = m.GetCounter().GetValue()
			}
			got[name+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	return got
}

// serve registers c in a pedantic registry (which checks every collected
// Metric against Describe) and serves it on a loopback server.
func serve(t *testing.T, c prometheus.Collector, opts promhttp.HandlerOpts) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, opts))
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

func check(t *testing.T, got, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("missing %s", k)
		} else if g != v {
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected %s = %v", k, v)
		}
	}
}

// TestScrape: a real floodgate.Limiter and a real httplimit middleware,
// after known sequences of requests, scraped over HTTP: every series with
// its value, every family with Info's type and help.
func TestScrape(t *testing.T) {
	c := prommetrics.New()
	if err := c.Add("core", coreLimiter(t)); err != nil {
		t.Fatal(err)
	}
	if err := c.Add("http", httpLimiter(t)); err != nil {
		t.Fatal(err)
	}
	got, fams, _ := scrape(t, serve(t, c, promhttp.HandlerOpts{}))
	want := map[string]float64{}
	for _, w := range []map[string]float64{coreWant, httpWant} {
		for k, v := range w {
			want[k] = v
		}
	}
	check(t, got, want)
	for _, m := range countinfo.All() {
		info := countinfo.Of(m)
		f := fams[info.Prometheus]
		if f == nil {
			if m == counts.Requests || m == counts.Keys || m == counts.KeysMax || m == counts.Evictions {
				t.Errorf("no family %s", info.Prometheus)
			}
			continue
		}
		typ := dto.MetricType_GAUGE
		if info.Kind == countinfo.Counter {
			typ = dto.MetricType_COUNTER
		}
		if f.GetType() != typ || f.GetHelp() != info.Help {
			t.Errorf("%s: type %v help %q, want %v %q", info.Prometheus, f.GetType(), f.GetHelp(), typ, info.Help)
		}
	}
	// The values read again at a scrape: one more request on the core.
	again := coreLimiter(t)
	c.Remove("core")
	if err := c.Add("core", again); err != nil {
		t.Fatal(err)
	}
	again.Allow(keyC)
	got, _, _ = scrape(t, serve(t, c, promhttp.HandlerOpts{}))
	if k := `floodgate_requests_total{limiter="core",policy="",result="denied_global",route=""}`; got[k] != 2 {
		t.Errorf("after one more denial by the cap: %s = %v, want 2", k, got[k])
	}
}

// TestNoClientKey: no metric name, label name or label value holds a
// client's key, whatever the keys were.
func TestNoClientKey(t *testing.T) {
	c := prommetrics.New()
	c.Add("core", coreLimiter(t))
	c.Add("http", httpLimiter(t))
	_, fams, body := scrape(t, serve(t, c, promhttp.HandlerOpts{}))
	for _, key := range []string{keyA, keyB, keyC, "127.0.0.1"} {
		if strings.Contains(body, key) {
			t.Errorf("the scrape holds the client key %q:\n%s", key, body)
		}
	}
	names := []string{countinfo.LabelLimiter, countinfo.LabelRoute, countinfo.LabelPolicy}
	for _, m := range countinfo.All() {
		if l := countinfo.Of(m).Label; l != "" {
			names = append(names, l)
		}
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if !slices.Contains(names, lp.GetName()) {
					t.Errorf("%s has a label %q that no Info names", name, lp.GetName())
				}
			}
		}
	}
}

// TestLint: client_golang's linter finds nothing wrong with the names,
// types and help, and a pedantic registry (which checks what Collect
// sends against Describe) gathers every Metric of package counts.
func TestLint(t *testing.T) {
	c := prommetrics.New()
	c.Add("core", coreLimiter(t))
	c.Add("every", everyMetric{})
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(fams) != len(countinfo.All()) {
		t.Errorf("gathered %d families, want one per Metric (%d)", len(fams), len(countinfo.All()))
	}
}

// everyMetric is a Source of one series of every Metric, with every label
// its Info gives.
type everyMetric struct{}

func (everyMetric) AppendCounts(dst []counts.Sample) []counts.Sample {
	for _, m := range countinfo.All() {
		s := counts.Sample{Metric: m, Value: 1}
		if countinfo.Of(m).Scoped {
			s.Route, s.Policy = "r", "p"
		}
		if countinfo.Of(m).Label != "" {
			s.Label = "x"
		}
		dst = append(dst, s)
	}
	return dst
}

// sourceFunc is a Source of its own making, for what the real ones never
// send.
type sourceFunc func([]counts.Sample) []counts.Sample

func (f sourceFunc) AppendCounts(dst []counts.Sample) []counts.Sample { return f(dst) }

// TestDuplicatesSummed: a series appended twice is one series, the sum of
// both; labels that a Metric's Info does not give are dropped, not a new
// series.
func TestDuplicatesSummed(t *testing.T) {
	c := prommetrics.New()
	c.Add("twice", sourceFunc(func(dst []counts.Sample) []counts.Sample {
		return append(dst,
			counts.Sample{Metric: counts.Requests, Route: "r", Label: countinfo.Allowed, Value: 2},
			counts.Sample{Metric: counts.Keys, Route: "r", Policy: "p", Value: 5},
			counts.Sample{Metric: counts.Requests, Route: "r", Label: countinfo.Allowed, Value: 3},
			counts.Sample{Metric: counts.Keys, Route: "r", Policy: "p", Label: "ignored", Value: 1},
			counts.Sample{Metric: counts.StoreCalls, Route: "ignored", Policy: "ignored", Value: 7},
			counts.Sample{Metric: counts.StoreCalls, Value: 1})
	}))
	got, _, _ := scrape(t, serve(t, c, promhttp.HandlerOpts{}))
	check(t, got, map[string]float64{
		`floodgate_requests_total{limiter="twice",policy="",result="allowed",route="r"}`: 5,
		`floodgate_keys{limiter="twice",policy="p",route="r"}`:                           6,
		`floodgate_store_round_trips_total{limiter="twice"}`:                             8,
	})
}

// TestBadSources: a Source that panics, reports a Metric that package
// counts does not have, or a label that is not UTF-8 fails its own part
// of the scrape with an error naming it; Collect does not panic, and with
// ContinueOnError the good Source is served.
func TestBadSources(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  counts.Source
		want string
	}{
		{"panics", sourceFunc(func(dst []counts.Sample) []counts.Sample {
			dst = append(dst, counts.Sample{Metric: counts.Keys, Value: 1})
			if len(dst) > 0 {
				panic("broken")
			}
			return dst
		}), "panicked: broken"},
		{"unknown", sourceFunc(func(dst []counts.Sample) []counts.Sample {
			return append(dst, counts.Sample{Metric: counts.Metric(200), Value: 1})
		}), "unknown counts.Metric 200"},
		{"utf8", sourceFunc(func(dst []counts.Sample) []counts.Sample {
			return append(dst, counts.Sample{Metric: counts.Keys, Route: "\xff", Value: 1})
		}), "UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := prommetrics.New()
			c.Add("core", coreLimiter(t))
			c.Add(tc.name, tc.src)
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(c)
			fams, err := reg.Gather()
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.name)) {
				t.Fatalf("Gather: %v, want an error naming %q with %q", err, tc.name, tc.want)
			}
			m := map[string]*dto.MetricFamily{}
			for _, f := range fams {
				m[f.GetName()] = f
			}
			check(t, series(m), coreWant)
			got, _, _ := scrape(t, serve(t, c, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
			check(t, got, coreWant)
		})
	}
}

// TestAddRemove: Add refuses an empty, repeated or non-UTF-8 name and a
// nil Source; Remove takes a Source's series away.
func TestAddRemove(t *testing.T) {
	c := prommetrics.New()
	core := coreLimiter(t)
	if err := c.Add("core", core); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		src  counts.Source
	}{{"", core}, {"core", core}, {"\xff", core}, {"nil", nil}} {
		if err := c.Add(tc.name, tc.src); err == nil {
			t.Errorf("Add(%q, %v): no error", tc.name, tc.src)
		}
	}
	if err := c.Add("http", httpLimiter(t)); err != nil {
		t.Fatal(err)
	}
	url := serve(t, c, promhttp.HandlerOpts{})
	if !c.Remove("core") || c.Remove("core") || c.Remove("never") {
		t.Fatal("Remove: wrong answers")
	}
	got, _, _ := scrape(t, url)
	check(t, got, httpWant)
	c.Remove("http")
	if got, _, _ := scrape(t, url); len(got) != 0 {
		t.Errorf("without Sources: %v", got)
	}
}

// TestConcurrentScrapes: scrapes, Adds, Removes and requests at once,
// under the race detector; every scrape has all of the core's series.
func TestConcurrentScrapes(t *testing.T) {
	c := prommetrics.New()
	core := coreLimiter(t)
	c.Add("core", core)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	stop := make(chan struct{})
	var writer sync.WaitGroup
	writer.Add(1)
	go func() {
		defer writer.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			core.Allow(keyA)
			name := fmt.Sprintf("extra%d", i%3)
			if !c.Remove(name) {
				c.Add(name, everyMetric{})
			}
		}
	}()
	var scrapers sync.WaitGroup
	var errs [4]error
	for g := range errs {
		scrapers.Add(1)
		go func() {
			defer scrapers.Done()
			for range 200 {
				fams, err := reg.Gather()
				if err != nil {
					errs[g] = err
					return
				}
				n := 0
				for _, f := range fams {
					for _, m := range f.GetMetric() {
						for _, lp := range m.GetLabel() {
							if lp.GetName() == countinfo.LabelLimiter && lp.GetValue() == "core" {
								n++
							}
						}
					}
				}
				if n != len(coreWant) {
					errs[g] = fmt.Errorf("a scrape had %d of the core's series, want %d", n, len(coreWant))
					return
				}
			}
		}()
	}
	scrapers.Wait()
	close(stop)
	writer.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// TestDocNamesEveryMetric: the package documentation lists each Metric's
// Prometheus name beside it, with its labels, so that it says what a
// scrape holds.
func TestDocNamesEveryMetric(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range countinfo.All() {
		info := countinfo.Of(m)
		labels := []string{countinfo.LabelLimiter}
		if info.Scoped {
			labels = append(labels, countinfo.LabelRoute, countinfo.LabelPolicy)
		}
		if info.Label != "" {
			labels = append(labels, info.Label)
		}
		line := regexp.MustCompile(`(?m)^//\t` + regexp.QuoteMeta(info.Prometheus+"{"+strings.Join(labels, ", ")+"}") + ` +counts\.` + m.String() + `$`)
		if !line.Match(doc) {
			t.Errorf("the package documentation has no line for %s: %s{%s}", m, info.Prometheus, strings.Join(labels, ", "))
		}
	}
}
