package otelmetrics_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/internal/countinfo"
	"github.com/floodgate-go/floodgate/otelmetrics"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// The keys of the clients in the known sequence: none may appear in an
// attribute.
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

// coreWant is what coreLimiter reports, under the limiter name "core":
// data points by instrument{attributes}.
var coreWant = map[string]int64{
	`floodgate.requests{floodgate.limiter=core,floodgate.result=allowed}`:         3,
	`floodgate.requests{floodgate.limiter=core,floodgate.result=denied}`:          1,
	`floodgate.requests{floodgate.limiter=core,floodgate.result=denied_global}`:   1,
	`floodgate.keys{floodgate.limiter=core}`:                                      1,
	`floodgate.keys.limit{floodgate.limiter=core}`:                                1,
	`floodgate.evictions{floodgate.eviction.reason=idle,floodgate.limiter=core}`:  0,
	`floodgate.evictions{floodgate.eviction.reason=bound,floodgate.limiter=core}`: 2,
	`floodgate.evictions{floodgate.eviction.reason=fresh,floodgate.limiter=core}`: 0,
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
var httpWant = func() map[string]int64 {
	m := map[string]int64{}
	for _, r := range []struct {
		route, policy            string
		allowed, denied, maxKeys int64
	}{{"GET /hello", "hourly", 2, 1, 100}, {"default", "fallback", 1, 0, 100}} {
		at := func(name, before, policy, after string) string {
			if policy != "" {
				policy = "floodgate.policy=" + policy + ","
			}
			return fmt.Sprintf("%s{%sfloodgate.limiter=http,%s%sfloodgate.route=%s}", name, before, policy, after, r.route)
		}
		m[at("floodgate.requests", "", "", "floodgate.result=allowed,")] = r.allowed
		m[at("floodgate.requests", "", "", "floodgate.result=exempt,")] = 0
		m[at("floodgate.requests", "", r.policy, "floodgate.result=denied,")] = r.denied
		m[at("floodgate.requests", "", r.policy, "floodgate.result=shadow_denied,")] = 0
		m[at("floodgate.keys", "", r.policy, "")] = 1
		m[at("floodgate.keys.limit", "", r.policy, "")] = r.maxKeys
		for _, reason := range []string{"idle", "bound", "fresh"} {
			m[at("floodgate.evictions", "floodgate.eviction.reason="+reason+",", r.policy, "")] = 0
		}
	}
	return m
}()

// newExporter is an Exporter on a MeterProvider with a ManualReader,
// closed at the end of the test.
func newExporter(t *testing.T) (*otelmetrics.Exporter, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	e, err := otelmetrics.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, reader
}

// point is one data point as collected, with its instrument.
type point struct {
	metric metricdata.Metrics
	dp     metricdata.DataPoint[int64]
	sum    *metricdata.Sum[int64] // nil for a gauge
}

// collect collects reader and returns its data points by
// instrument{attributes}, and Collect's error.
func collect(t *testing.T, reader *sdkmetric.ManualReader) (map[string]point, error) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	err := reader.Collect(context.Background(), &rm)
	got := map[string]point{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelmetrics.ScopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			var dps []metricdata.DataPoint[int64]
			var sum *metricdata.Sum[int64]
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				dps, sum = d.DataPoints, &d
			case metricdata.Gauge[int64]:
				dps = d.DataPoints
			default:
				t.Fatalf("%s: data %T", m.Name, m.Data)
			}
			for _, dp := range dps {
				k := m.Name + "{" + dp.Attributes.Encoded(attribute.DefaultEncoder()) + "}"
				if _, dup := got[k]; dup {
					t.Errorf("two data points %s", k)
				}
				got[k] = point{m, dp, sum}
			}
		}
	}
	return got, err
}

func check(t *testing.T, got map[string]point, want map[string]int64) {
	t.Helper()
	for k, v := range want {
		if p, ok := got[k]; !ok {
			t.Errorf("missing %s", k)
		} else if p.dp.Value != v {
			t.Errorf("%s = %d, want %d", k, p.dp.Value, v)
		}
	}
	for k, p := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected %s = %d", k, p.dp.Value)
		}
	}
}

func merge(ms ...map[string]int64) map[string]int64 {
	all := map[string]int64{}
	for _, m := range ms {
		for k, v := range m {
			all[k] = v
		}
	}
	return all
}

// TestCollect: a real floodgate.Limiter and a real httplimit middleware,
// after known sequences of requests, collected by the SDK: every data
// point with its value and attributes, every instrument with Info's name,
// unit, description and kind (a counter a cumulative monotonic sum).
func TestCollect(t *testing.T) {
	e, reader := newExporter(t)
	if err := e.Add("core", coreLimiter(t)); err != nil {
		t.Fatal(err)
	}
	if err := e.Add("http", httpLimiter(t)); err != nil {
		t.Fatal(err)
	}
	got, err := collect(t, reader)
	if err != nil {
		t.Fatal(err)
	}
	check(t, got, merge(coreWant, httpWant))
	infos := map[string]countinfo.Info{}
	for _, m := range countinfo.All() {
		infos[countinfo.Of(m).OpenTelemetry] = countinfo.Of(m)
	}
	for k, p := range got {
		info := infos[p.metric.Name]
		if p.metric.Unit != info.Unit || p.metric.Description != info.Help {
			t.Errorf("%s: unit %q description %q, want %q %q", k, p.metric.Unit, p.metric.Description, info.Unit, info.Help)
		}
		if info.Kind == countinfo.Counter {
			if p.sum == nil || !p.sum.IsMonotonic || p.sum.Temporality != metricdata.CumulativeTemporality {
				t.Errorf("%s: a counter as %+v", k, p.sum)
			}
		} else if p.sum != nil {
			t.Errorf("%s: a gauge as a sum", k)
		}
	}
}

// TestCumulative: a second collection after more requests reports the
// counters' totals from the same start, not the difference.
func TestCumulative(t *testing.T) {
	e, reader := newExporter(t)
	core := coreLimiter(t)
	e.Add("core", core)
	first, err := collect(t, reader)
	if err != nil {
		t.Fatal(err)
	}
	core.Allow(keyC)            // denied by the cap again, its unit refunded: c's state is a new client's
	core.Allow("client-d-0b4e") // denied by the cap; MaxKeys 1 evicts c, fresh
	second, err := collect(t, reader)
	if err != nil {
		t.Fatal(err)
	}
	want := merge(coreWant)
	want[`floodgate.requests{floodgate.limiter=core,floodgate.result=denied_global}`] = 3
	want[`floodgate.evictions{floodgate.eviction.reason=fresh,floodgate.limiter=core}`] = 1
	check(t, second, want)
	for k, p := range second {
		if p.sum != nil && !p.dp.StartTime.Equal(first[k].dp.StartTime) {
			t.Errorf("%s: start time moved from %v to %v", k, first[k].dp.StartTime, p.dp.StartTime)
		}
		if p.sum != nil && p.dp.Value < first[k].dp.Value {
			t.Errorf("%s: fell from %d to %d", k, first[k].dp.Value, p.dp.Value)
		}
	}
}

// TestNoClientKey: no attribute key or value holds a client's key.
func TestNoClientKey(t *testing.T) {
	e, reader := newExporter(t)
	e.Add("core", coreLimiter(t))
	e.Add("http", httpLimiter(t))
	got, err := collect(t, reader)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[attribute.Key]bool{countinfo.AttributeLimiter: true, countinfo.AttributeRoute: true, countinfo.AttributePolicy: true}
	for _, m := range countinfo.All() {
		if a := countinfo.Of(m).Attribute; a != "" {
			keys[attribute.Key(a)] = true
		}
	}
	for k, p := range got {
		for _, key := range []string{keyA, keyB, keyC, "127.0.0.1"} {
			if strings.Contains(k, key) {
				t.Errorf("%s holds the client key %q", k, key)
			}
		}
		for _, kv := range p.dp.Attributes.ToSlice() {
			if !keys[kv.Key] {
				t.Errorf("%s has an attribute %q that no Info names", k, kv.Key)
			}
		}
	}
}

// sourceFunc is a Source of its own making, for what the real ones never
// send.
type sourceFunc func([]counts.Sample) []counts.Sample

func (f sourceFunc) AppendCounts(dst []counts.Sample) []counts.Sample { return f(dst) }

// TestDuplicatesSummed: a series appended twice is one data point, the
// sum of both; labels that a Metric's Info does not give are dropped, not
// a new data point.
func TestDuplicatesSummed(t *testing.T) {
	e, reader := newExporter(t)
	e.Add("twice", sourceFunc(func(dst []counts.Sample) []counts.Sample {
		return append(dst,
			counts.Sample{Metric: counts.Requests, Route: "r", Label: countinfo.Allowed, Value: 2},
			counts.Sample{Metric: counts.Keys, Route: "r", Policy: "p", Value: 5},
			counts.Sample{Metric: counts.Requests, Route: "r", Label: countinfo.Allowed, Value: 3},
			counts.Sample{Metric: counts.Keys, Route: "r", Policy: "p", Label: "ignored", Value: 1},
			counts.Sample{Metric: counts.StoreCalls, Route: "ignored", Policy: "ignored", Value: 7},
			counts.Sample{Metric: counts.StoreCalls, Value: 1},
			counts.Sample{Metric: counts.StoreErrors, Label: countinfo.ErrorTimeout, Value: 4})
	}))
	got, err := collect(t, reader)
	if err != nil {
		t.Fatal(err)
	}
	check(t, got, map[string]int64{
		`floodgate.requests{floodgate.limiter=twice,floodgate.result=allowed,floodgate.route=r}`: 5,
		`floodgate.keys{floodgate.limiter=twice,floodgate.policy=p,floodgate.route=r}`:           6,
		`floodgate.store.round_trips{floodgate.limiter=twice}`:                                   8,
		`floodgate.store.errors{error.type=timeout,floodgate.limiter=twice}`:                     4,
	})
}

// TestBadSources: a Source that panics, or reports a Metric that package
// counts does not have, makes Collect return an error naming it; the
// callback does not panic, and the other Sources are collected.
func TestBadSources(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  counts.Source
		want string
		more map[string]int64
	}{
		{"panics", sourceFunc(func(dst []counts.Sample) []counts.Sample {
			dst = append(dst, counts.Sample{Metric: counts.Keys, Value: 1})
			if len(dst) > 0 {
				panic("broken")
			}
			return dst
		}), "panicked: broken", nil},
		{"unknown", sourceFunc(func(dst []counts.Sample) []counts.Sample {
			return append(dst, counts.Sample{Metric: counts.Metric(200), Value: 1},
				counts.Sample{Metric: counts.Keys, Value: 9})
		}), "unknown counts.Metric [200]", map[string]int64{`floodgate.keys{floodgate.limiter=unknown}`: 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, reader := newExporter(t)
			e.Add("core", coreLimiter(t))
			e.Add(tc.name, tc.src)
			got, err := collect(t, reader)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.name)) {
				t.Fatalf("Collect: %v, want an error naming %q with %q", err, tc.name, tc.want)
			}
			check(t, got, merge(coreWant, tc.more))
		})
	}
}

// TestAddRemoveClose: Add refuses an empty or repeated name and a nil
// Source; Remove takes a Source's data points away; Close unregisters
// the callback, which then reads no Source, and Add after it fails.
func TestAddRemoveClose(t *testing.T) {
	if _, err := otelmetrics.New(nil); err == nil {
		t.Error("New(nil): no error")
	}
	e, reader := newExporter(t)
	core := coreLimiter(t)
	if err := e.Add("core", core); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		src  counts.Source
	}{{"", core}, {"core", core}, {"nil", nil}} {
		if err := e.Add(tc.name, tc.src); err == nil {
			t.Errorf("Add(%q, %v): no error", tc.name, tc.src)
		}
	}
	reads := 0
	e.Add("http", httpLimiter(t))
	e.Add("reads", sourceFunc(func(dst []counts.Sample) []counts.Sample { reads++; return dst }))
	if !e.Remove("core") || e.Remove("core") || e.Remove("never") {
		t.Fatal("Remove: wrong answers")
	}
	got, err := collect(t, reader)
	if err != nil {
		t.Fatal(err)
	}
	check(t, got, httpWant)
	if reads != 1 {
		t.Fatalf("one collection read the Source %d times", reads)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := e.Add("late", core); err == nil {
		t.Error("Add after Close: no error")
	}
	got, err = collect(t, reader)
	if err != nil {
		t.Fatal(err)
	}
	check(t, got, nil)
	if reads != 1 {
		t.Fatalf("after Close the Source was read again (%d reads)", reads)
	}
}

// TestConcurrentCollections: two readers collecting at once while
// Sources are added and removed and requests made, under the race
// detector; every collection has all of the core's data points.
func TestConcurrentCollections(t *testing.T) {
	r1, r2 := sdkmetric.NewManualReader(), sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r1), sdkmetric.WithReader(r2))
	defer mp.Shutdown(context.Background())
	e, err := otelmetrics.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	core := coreLimiter(t)
	e.Add("core", core)
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
			if !e.Remove(name) {
				e.Add(name, sourceFunc(func(dst []counts.Sample) []counts.Sample {
					return append(dst, counts.Sample{Metric: counts.Keys, Route: "r", Value: 1})
				}))
			}
		}
	}()
	var readers sync.WaitGroup
	errs := make([]error, 4)
	for g := range errs {
		reader := []*sdkmetric.ManualReader{r1, r2}[g%2]
		readers.Add(1)
		go func() {
			defer readers.Done()
			for range 100 {
				var rm metricdata.ResourceMetrics
				if err := reader.Collect(context.Background(), &rm); err != nil {
					errs[g] = err
					return
				}
				n := 0
				for _, sm := range rm.ScopeMetrics {
					for _, m := range sm.Metrics {
						var sets []attribute.Set
						switch d := m.Data.(type) {
						case metricdata.Sum[int64]:
							for _, dp := range d.DataPoints {
								sets = append(sets, dp.Attributes)
							}
						case metricdata.Gauge[int64]:
							for _, dp := range d.DataPoints {
								sets = append(sets, dp.Attributes)
							}
						}
						for _, s := range sets {
							if v, _ := s.Value(countinfo.AttributeLimiter); v.AsString() == "core" {
								n++
							}
						}
					}
				}
				if n != len(coreWant) {
					errs[g] = fmt.Errorf("a collection had %d of the core's data points, want %d", n, len(coreWant))
					return
				}
			}
		}()
	}
	readers.Wait()
	close(stop)
	writer.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// TestDocNamesEveryMetric: the package documentation lists each Metric's
// instrument beside it, with its unit and its own attribute, so that it
// says what a collection holds.
func TestDocNamesEveryMetric(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range countinfo.All() {
		info := countinfo.Of(m)
		head := info.OpenTelemetry + " (" + info.Unit + ")"
		line := regexp.MustCompile(`(?m)^//\t` + regexp.QuoteMeta(head) + `.* counts\.` + m.String() + `$`)
		found := line.Find(doc)
		if found == nil {
			t.Errorf("the package documentation has no line for %s: %s", m, head)
			continue
		}
		if info.Attribute != "" && !strings.Contains(string(found), " "+info.Attribute+" ") {
			t.Errorf("the documentation's line for %s does not name its attribute %s: %s", m, info.Attribute, found)
		}
	}
}
