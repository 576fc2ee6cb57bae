package counts

import "strconv"

// A Source appends its counts to dst and returns the result. It may be
// called at any time, from any goroutine, while requests are served; each
// value is read without stopping them, so two Samples are not a snapshot of
// one instant. A Source appends the same series, in the same order, on
// every call (their values change), except that a route or policy added
// while serving adds its own.
type Source interface {
	AppendCounts(dst []Sample) []Sample
}

// Sample is one series' value now.
type Sample struct {
	// Metric is what the Sample measures.
	Metric Metric
	// Route is the route's pattern (httplimit), the method or service
	// (grpclimit), "default" for a middleware's Default policies, or ""
	// for a floodgate.Limiter or redislimit.Limiter of its own. Policy is
	// the policy's name, or "". Both are set only for the Metrics that a
	// route or policy reports: Requests, Keys, KeysMax, Evictions and
	// InFlight.
	Route, Policy string
	// Label is the value of the Metric's own dimension, "" for a Metric
	// without one: a result of Requests ("allowed", "denied",
	// "denied_global", "shadow_denied", "exempt", "fail_open",
	// "fail_closed", "fail_local", "fail_error", "abandoned"), a reason
	// of Evictions ("idle", "bound", "fresh") or a kind of StoreErrors
	// ("timeout", "key", "other").
	Label string
	// Value is the count, or the gauge's value, now.
	Value int64
}

// Metric says what a Sample measures.
type Metric uint8

// The metrics. Their names in Prometheus and OpenTelemetry are those of
// the prommetrics and otelmetrics modules.
const (
	// Requests counts decisions by result (Label). A middleware counts
	// each request once, under its route and, for a refusal, the policy
	// that refused it (Policy is "" for the other results); a
	// floodgate.Limiter counts only with Config.Stats. The results:
	// "allowed"; "denied", refused by the client's own limit (or by
	// Redis); "denied_global", admitted by the client's limit and refused
	// by the global cap; "shadow_denied", what a shadow policy would have
	// refused, served; "exempt", let through unlimited and uncharged by
	// an exemption; "fail_open", "fail_closed", "fail_local" and
	// "fail_error", decided by redislimit's FailureMode of that name
	// while Redis failed; "abandoned", refused because its caller's
	// context ended before Redis answered.
	Requests Metric = iota
	// Keys is the number of clients' states held now.
	Keys
	// KeysMax is the bound Keys never exceeds (MaxKeys); absent without
	// one.
	KeysMax
	// Evictions counts clients' states removed, by reason (Label):
	// "idle" for a state idle for IdleTTL, "bound" for a spent state
	// evicted at MaxKeys (remembered, so that it comes back with no more
	// than it left with), "fresh" for a state evicted at MaxKeys that
	// was a new client's already (forgotten at no cost).
	Evictions
	// StoreCalls counts round trips to a Store's state (Redis, for
	// redislimit): a pipeline of the calls that its engine batched
	// together is one.
	StoreCalls
	// StoreErrors counts the calls to a Store's state that failed (each
	// call of a failed batch: one per decision it failed), by kind
	// (Label): "timeout", "key" (an error reply about one key's data) or
	// "other".
	StoreErrors
	// StoreBreakerOpen is 1 while a Store's breaker is open (its state
	// is not asked, and its failure mode decides), else 0.
	StoreBreakerOpen
	// StoreBreakerOpens counts the times a Store's breaker opened.
	StoreBreakerOpens
	// StoreLeased counts the units lease mode took from a Store beyond the
	// requests that took them; StoreReturned, the unspent ones given back;
	// StoreLapsed, the unspent ones whose time ran out first.
	StoreLeased
	StoreReturned
	StoreLapsed
	// InFlight is the requests a middleware's in-flight policy holds a
	// slot for now, in this process: they were admitted and have not
	// ended.
	InFlight
	numMetrics
)

var names = [numMetrics]string{"Requests", "Keys", "KeysMax", "Evictions", "StoreCalls", "StoreErrors",
	"StoreBreakerOpen", "StoreBreakerOpens", "StoreLeased", "StoreReturned", "StoreLapsed", "InFlight"}

// String returns the Metric's name in this package ("Requests"), or
// "Metric(n)" for a Metric that is not one of its.
func (m Metric) String() string {
	if m < numMetrics {
		return names[m]
	}
	return "Metric(" + strconv.Itoa(int(m)) + ")"
}
