package counts

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
	// the policy's name, or "". Both are set only for a Metric whose Info
	// says Scoped.
	Route, Policy string
	// Label is the value of the Metric's own dimension (Info.Label): a
	// Result, an eviction reason or an error kind; "" for a Metric without
	// one.
	Label string
	// Value is the count, or the gauge's value, now.
	Value int64
}

// Metric says what a Sample measures.
type Metric uint8

// The metrics. Their names in each ecosystem are in Info.
const (
	// Requests counts decisions by result (Label: a Result). A
	// middleware counts each request once, under its route and, for a
	// refusal, the policy that refused it (Policy is "" for the other
	// results); a floodgate.Limiter counts only with Config.Stats.
	Requests Metric = iota
	// Keys is the number of clients' states held now.
	Keys
	// KeysMax is the bound Keys never exceeds (MaxKeys); absent without
	// one.
	KeysMax
	// Evictions counts clients' states removed, by reason (Label):
	// EvictIdle for a state idle for IdleTTL, EvictBound for a spent state
	// evicted at MaxKeys (remembered, so that it comes back with no more
	// than it left with), EvictFresh for a state evicted at MaxKeys that
	// was a new client's already (forgotten at no cost).
	Evictions
	// StoreCalls counts round trips to a Store's state (Redis, for
	// redislimit): a pipeline of the calls that its engine batched
	// together is one.
	StoreCalls
	// StoreErrors counts the calls to a Store's state that failed (each
	// call of a failed batch: one per decision it failed), by kind (Label):
	// ErrorTimeout, ErrorKey (an error reply about one key's data) or
	// ErrorOther.
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

// The results of Requests.
const (
	Allowed      = "allowed"
	Denied       = "denied"        // refused by the client's own limit (or by Redis)
	DeniedGlobal = "denied_global" // the client's limit admitted it, the global cap refused it
	ShadowDenied = "shadow_denied" // a shadow policy would have refused it; it was served
	Exempt       = "exempt"        // let through unlimited and uncharged by an exemption
	FailOpen     = "fail_open"     // Redis failed; admitted by FailOpen
	FailClosed   = "fail_closed"   // Redis failed; refused by FailClosed
	FailLocal    = "fail_local"    // Redis failed; decided by FailLocal's in-process limiter
	FailError    = "fail_error"    // Redis failed; refused with an error by FailError
	Abandoned    = "abandoned"     // its caller's context ended before Redis answered; refused
)

// The reasons of Evictions.
const (
	EvictIdle  = "idle"
	EvictBound = "bound"
	EvictFresh = "fresh"
)

// The kinds of StoreErrors.
const (
	ErrorTimeout = "timeout"
	ErrorKey     = "key"
	ErrorOther   = "other"
)

// Kind is how a Metric's value behaves.
type Kind uint8

const (
	// Counter only grows, from 0 at the Source's start.
	Counter Kind = iota
	// Gauge is a level now, which may fall.
	Gauge
)

// Info names a Metric in both ecosystems and says what it holds.
type Info struct {
	// Prometheus is the metric's name there, with its _total suffix for a
	// counter; OpenTelemetry is the instrument's name there.
	Prometheus, OpenTelemetry string
	// Kind says whether the Metric is a counter or a gauge.
	Kind Kind
	// Unit is the OpenTelemetry unit (UCUM, with an annotation for a
	// count: "{request}").
	Unit string
	// Help is the metric's description in both.
	Help string
	// Scoped says the Metric has the route and policy labels.
	Scoped bool
	// Label is the Prometheus label name of Sample.Label, and Attribute
	// its OpenTelemetry attribute key; both "" for a Metric without one.
	Label, Attribute string
}

// The labels every Metric has (LabelLimiter: the name a Source was added
// under in the exporter) and the Scoped ones, in each ecosystem.
const (
	LabelLimiter = "limiter"
	LabelRoute   = "route"
	LabelPolicy  = "policy"

	AttributeLimiter = "floodgate.limiter"
	AttributeRoute   = "floodgate.route"
	AttributePolicy  = "floodgate.policy"
)

var infos = [numMetrics]Info{
	Requests: {"floodgate_requests_total", "floodgate.requests", Counter, "{request}",
		"Requests decided, by result: allowed, denied, denied_global, shadow_denied, exempt, fail_open, fail_closed, fail_local, fail_error, abandoned.",
		true, "result", "floodgate.result"},
	Keys: {"floodgate_keys", "floodgate.keys", Gauge, "{key}",
		"Clients' states held now.", true, "", ""},
	KeysMax: {"floodgate_keys_max", "floodgate.keys.limit", Gauge, "{key}",
		"The bound on clients' states held (MaxKeys).", true, "", ""},
	Evictions: {"floodgate_evictions_total", "floodgate.evictions", Counter, "{key}",
		"Clients' states removed, by reason: idle (IdleTTL), bound (spent, evicted at MaxKeys and remembered), fresh (evicted at MaxKeys, a new client's already).",
		true, "reason", "floodgate.eviction.reason"},
	StoreCalls: {"floodgate_store_round_trips_total", "floodgate.store.round_trips", Counter, "{call}",
		"Round trips to a Store's state (Redis).", false, "", ""},
	StoreErrors: {"floodgate_store_errors_total", "floodgate.store.errors", Counter, "{call}",
		"Calls to a Store's state that failed (each call of a failed batch), by kind: timeout, key (an error reply about one key's data), other.",
		false, "kind", "error.type"},
	StoreBreakerOpen: {"floodgate_store_breaker_open", "floodgate.store.breaker.open", Gauge, "1",
		"1 while the breaker is open and the FailureMode decides, else 0.", false, "", ""},
	StoreBreakerOpens: {"floodgate_store_breaker_opens_total", "floodgate.store.breaker.opens", Counter, "{open}",
		"Times the breaker opened.", false, "", ""},
	StoreLeased: {"floodgate_store_leased_units_total", "floodgate.store.leased", Counter, "{unit}",
		"Units lease mode took from a Store beyond the requests that took them.", false, "", ""},
	StoreReturned: {"floodgate_store_returned_units_total", "floodgate.store.returned", Counter, "{unit}",
		"Unspent leased units given back to a Store.", false, "", ""},
	StoreLapsed: {"floodgate_store_lapsed_units_total", "floodgate.store.lapsed", Counter, "{unit}",
		"Unspent leased units whose time ran out before they could go back.", false, "", ""},
	InFlight: {"floodgate_in_flight", "floodgate.in_flight", Gauge, "{request}",
		"Requests that hold a slot of an in-flight policy now, in this process.", true, "", ""},
}

// Info returns m's names and description. It panics for a Metric that is
// not one of this package's.
func (m Metric) Info() Info { return infos[m] }

// All returns every Metric, in order.
func All() []Metric {
	all := make([]Metric, numMetrics)
	for i := range all {
		all[i] = Metric(i)
	}
	return all
}
