package otelmetrics

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/internal/countinfo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ScopeName is the name of the Meter the Exporter's instruments belong
// to: the instrumentation scope of every data point.
const ScopeName = "github.com/floodgate-go/floodgate/otelmetrics"

// Exporter observes the counts of the Sources added to it. Its methods
// are safe for concurrent use, and its callback may run in several
// collections at once.
type Exporter struct {
	instruments []instrument             // by counts.Metric
	sources     atomic.Pointer[[]source] // sorted by name; replaced, never changed, so the callback takes no lock
	bufs        sync.Pool                // of *observation, one per collection in flight
	reg         metric.Registration

	mu     sync.Mutex // serialises Add, Remove and Close
	closed bool
}

type source struct {
	name string
	src  counts.Source
}

type instrument struct {
	obs    metric.Int64Observable
	scoped bool
	label  attribute.Key // "" for a Metric without its own attribute
}

// observation is what one collection reuses: the Samples read and the
// attributes of the data point being observed.
type observation struct {
	samples []counts.Sample
	attrs   []attribute.KeyValue
}

// New makes the instruments of every Metric in package counts on the
// Meter ScopeName of mp (with opts, such as metric.WithInstrumentationVersion),
// and registers the one callback that observes them. Close unregisters
// it.
func New(mp metric.MeterProvider, opts ...metric.MeterOption) (*Exporter, error) {
	if mp == nil {
		return nil, errors.New("otelmetrics: nil MeterProvider")
	}
	meter := mp.Meter(ScopeName, opts...)
	e := &Exporter{}
	e.sources.Store(&[]source{})
	all := countinfo.All()
	e.instruments = make([]instrument, len(all))
	obs := make([]metric.Observable, len(all))
	for i, m := range all {
		info := countinfo.Of(m)
		var (
			o   metric.Int64Observable
			err error
		)
		if info.Kind == countinfo.Counter {
			o, err = meter.Int64ObservableCounter(info.OpenTelemetry,
				metric.WithUnit(info.Unit), metric.WithDescription(info.Help))
		} else {
			o, err = meter.Int64ObservableGauge(info.OpenTelemetry,
				metric.WithUnit(info.Unit), metric.WithDescription(info.Help))
		}
		if err != nil {
			return nil, fmt.Errorf("otelmetrics: instrument %s: %w", info.OpenTelemetry, err)
		}
		e.instruments[i] = instrument{o, info.Scoped, attribute.Key(info.Attribute)}
		obs[i] = o
	}
	reg, err := meter.RegisterCallback(e.observe, obs...)
	if err != nil {
		return nil, fmt.Errorf("otelmetrics: registering the callback: %w", err)
	}
	e.reg = reg
	return e, nil
}

// Add has the Exporter observe s's counts with name as their
// floodgate.limiter attribute, from its next collection on. The name must
// be non-empty and not one that a Source of the Exporter has already; s
// must not be nil. After Close, Add returns an error.
func (e *Exporter) Add(name string, s counts.Source) error {
	switch {
	case name == "":
		return errors.New("otelmetrics: empty limiter name")
	case s == nil:
		return fmt.Errorf("otelmetrics: limiter %q: nil Source", name)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return fmt.Errorf("otelmetrics: limiter %q: Add after Close", name)
	}
	old := *e.sources.Load()
	i, found := slices.BinarySearchFunc(old, name, byName)
	if found {
		return fmt.Errorf("otelmetrics: limiter %q added twice", name)
	}
	next := slices.Insert(slices.Clip(old), i, source{name, s})
	e.sources.Store(&next)
	return nil
}

// Remove stops observing the Source added under name, from the next
// collection on, and reports whether there was one.
func (e *Exporter) Remove(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	old := *e.sources.Load()
	i, found := slices.BinarySearchFunc(old, name, byName)
	if found {
		next := slices.Delete(slices.Clone(old), i, i+1)
		e.sources.Store(&next)
	}
	return found
}

func byName(s source, name string) int { return cmp.Compare(s.name, name) }

// Close unregisters the callback: no Source is read again, and the
// instruments report nothing from the next collection on. It is
// idempotent, and returns the Meter's error from unregistering, if any.
func (e *Exporter) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	e.sources.Store(&[]source{})
	if err := e.reg.Unregister(); err != nil {
		return fmt.Errorf("otelmetrics: %w", err)
	}
	return nil
}

// observe is the callback: every Source's series, one data point each.
// Series that a Source appends more than once (the same Metric, Route,
// Policy and Label) are summed into one. A Source that panics, or that
// reports a Metric package counts does not have, is an error that names
// it (the SDK passes it to its error handler or returns it from a
// reader's Collect); the other Sources are observed all the same.
func (e *Exporter) observe(_ context.Context, o metric.Observer) error {
	ob, _ := e.bufs.Get().(*observation)
	if ob == nil {
		ob = &observation{}
	}
	var errs []error
	for _, s := range *e.sources.Load() {
		if err := e.observeSource(o, s, ob); err != nil {
			errs = append(errs, fmt.Errorf("otelmetrics: limiter %q: %w", s.name, err))
		}
	}
	clear(ob.samples[:cap(ob.samples)]) // hold no Source's strings until the next collection
	clear(ob.attrs[:cap(ob.attrs)])
	e.bufs.Put(ob)
	return errors.Join(errs...)
}

func (e *Exporter) observeSource(o metric.Observer, s source, ob *observation) (err error) {
	buf, err := appendCounts(s.src, ob.samples[:0])
	ob.samples = buf
	if err != nil {
		return err
	}
	// A Metric's attributes are those its countinfo.Info gives: clear the
	// others, so that they do not split a data point.
	var unknown []int // the unknown Metrics, as numbers: they have no names
	for i := range buf {
		sm := &buf[i]
		if int(sm.Metric) >= len(e.instruments) {
			if !slices.Contains(unknown, int(sm.Metric)) {
				unknown = append(unknown, int(sm.Metric))
			}
			continue
		}
		in := e.instruments[sm.Metric]
		if !in.scoped {
			sm.Route, sm.Policy = "", ""
		}
		if in.label == "" {
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
		if int(sm.Metric) >= len(e.instruments) {
			continue
		}
		in := e.instruments[sm.Metric]
		attrs := append(ob.attrs[:0], attribute.String(countinfo.AttributeLimiter, s.name))
		if sm.Route != "" {
			attrs = append(attrs, attribute.String(countinfo.AttributeRoute, sm.Route))
		}
		if sm.Policy != "" {
			attrs = append(attrs, attribute.String(countinfo.AttributePolicy, sm.Policy))
		}
		if sm.Label != "" {
			attrs = append(attrs, in.label.String(sm.Label))
		}
		ob.attrs = attrs
		o.ObserveInt64(in.obs, sm.Value, metric.WithAttributes(attrs...))
	}
	if len(unknown) > 0 {
		return fmt.Errorf("unknown counts.Metric %v", unknown)
	}
	return nil
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
