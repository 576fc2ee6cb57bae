package prommetrics

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/internal/countinfo"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector is a prometheus.Collector of the counts of the Sources added
// to it. Its methods are safe for concurrent use, and Collect may run in
// several scrapes at once.
type Collector struct {
	mu      sync.Mutex               // serialises Add and Remove
	sources atomic.Pointer[[]source] // sorted by name; replaced, never changed, so Collect takes no lock
	bufs    sync.Pool                // of *[]counts.Sample, one per Collect in flight
}

type source struct {
	name string
	src  counts.Source
}

// metric is one counts.Metric's Desc, made once: the Desc's labels are
// limiter, then route and policy for a Scoped Metric, then its own label
// if the Metric has one (see countinfo.Info).
type metric struct {
	desc   *prometheus.Desc
	kind   prometheus.ValueType
	scoped bool
	label  bool
}

var metrics = func() []metric {
	all := countinfo.All()
	ms := make([]metric, len(all))
	for i, m := range all {
		info := countinfo.Of(m)
		labels := []string{countinfo.LabelLimiter}
		if info.Scoped {
			labels = append(labels, countinfo.LabelRoute, countinfo.LabelPolicy)
		}
		if info.Label != "" {
			labels = append(labels, info.Label)
		}
		kind := prometheus.GaugeValue
		if info.Kind == countinfo.Counter {
			kind = prometheus.CounterValue
		}
		ms[i] = metric{prometheus.NewDesc(info.Prometheus, info.Help, labels, nil), kind, info.Scoped, info.Label != ""}
	}
	return ms
}()

// New returns a Collector without Sources.
func New() *Collector {
	c := &Collector{}
	c.sources.Store(&[]source{})
	return c
}

// Add has the Collector export s's counts with name as their limiter
// label, from its next scrape on. The name must be a non-empty UTF-8
// string that no Source of the Collector has already; s must not be nil.
func (c *Collector) Add(name string, s counts.Source) error {
	switch {
	case name == "":
		return errors.New("prommetrics: empty limiter name")
	case !utf8.ValidString(name):
		return fmt.Errorf("prommetrics: limiter name %q is not UTF-8", name)
	case s == nil:
		return fmt.Errorf("prommetrics: limiter %q: nil Source", name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.sources.Load()
	i, found := slices.BinarySearchFunc(old, name, func(e source, n string) int { return cmp.Compare(e.name, n) })
	if found {
		return fmt.Errorf("prommetrics: limiter %q added twice", name)
	}
	next := slices.Insert(slices.Clip(old), i, source{name, s})
	c.sources.Store(&next)
	return nil
}

// Remove stops exporting the Source added under name, from the next
// scrape on, and reports whether there was one. Its series then vanish
// from the Collector's output.
func (c *Collector) Remove(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.sources.Load()
	i, found := slices.BinarySearchFunc(old, name, func(e source, n string) int { return cmp.Compare(e.name, n) })
	if found {
		next := slices.Delete(slices.Clone(old), i, i+1)
		c.sources.Store(&next)
	}
	return found
}

// Describe sends the Desc of every Metric in package counts, whether or
// not a Source reports it.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range metrics {
		ch <- m.desc
	}
}

// Collect reads every Source and sends one Metric per series. Series that
// a Source appends more than once (the same Metric, Route, Policy and
// Label) are summed into one. What a Source gets wrong fails only its own
// part of the scrape, as an invalid Metric that the registry reports as an
// error (promhttp then answers 500, or with HandlerOpts.ErrorHandling
// ContinueOnError serves the rest): a panic in AppendCounts, a Metric that
// is not one of package counts', a label value that is not UTF-8. Collect
// itself never panics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	bp, _ := c.bufs.Get().(*[]counts.Sample)
	if bp == nil {
		bp = new([]counts.Sample)
	}
	for _, s := range *c.sources.Load() {
		*bp = collect(ch, s, (*bp)[:0])
	}
	clear((*bp)[:cap(*bp)]) // hold no Source's strings until the next scrape
	c.bufs.Put(bp)
}

// collect sends s's series and returns the buffer it read them into.
func collect(ch chan<- prometheus.Metric, s source, buf []counts.Sample) []counts.Sample {
	buf, err := appendCounts(s.src, buf)
	if err != nil {
		err = fmt.Errorf("prommetrics: limiter %q: %w", s.name, err)
		ch <- prometheus.NewInvalidMetric(prometheus.NewInvalidDesc(err), err)
		return buf
	}
	// A Metric's labels are those its countinfo.Info gives: clear the
	// others, so that they neither split a series nor fail the Desc.
	for i := range buf {
		sm := &buf[i]
		if int(sm.Metric) >= len(metrics) {
			continue // reported below
		}
		m := metrics[sm.Metric]
		if !m.scoped {
			sm.Route, sm.Policy = "", ""
		}
		if !m.label {
			sm.Label = ""
		}
	}
	slices.SortStableFunc(buf, compareSeries)
	for i := 0; i < len(buf); {
		sm := buf[i]
		j := i + 1
		for ; j < len(buf) && compareSeries(buf[j], sm) == 0; j++ {
			sm.Value += buf[j].Value
		}
		i = j
		if int(sm.Metric) >= len(metrics) {
			err := fmt.Errorf("prommetrics: limiter %q: unknown counts.Metric %d", s.name, sm.Metric)
			ch <- prometheus.NewInvalidMetric(prometheus.NewInvalidDesc(err), err)
			continue
		}
		m := metrics[sm.Metric]
		var values [4]string
		lv := append(values[:0], s.name)
		if m.scoped {
			lv = append(lv, sm.Route, sm.Policy)
		}
		if m.label {
			lv = append(lv, sm.Label)
		}
		pm, err := prometheus.NewConstMetric(m.desc, m.kind, float64(sm.Value), lv...)
		if err != nil {
			pm = prometheus.NewInvalidMetric(m.desc, fmt.Errorf("prommetrics: limiter %q: %w", s.name, err))
		}
		ch <- pm
	}
	return buf
}

// appendCounts is s.AppendCounts(buf), with a panic turned into an error.
func appendCounts(s counts.Source, buf []counts.Sample) (out []counts.Sample, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = buf[:0], fmt.Errorf("AppendCounts panicked: %v", r)
		}
	}()
	return s.AppendCounts(buf), nil
}

func compareSeries(a, b counts.Sample) int {
	return cmp.Or(cmp.Compare(a.Metric, b.Metric), cmp.Compare(a.Route, b.Route),
		cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Label, b.Label))
}
