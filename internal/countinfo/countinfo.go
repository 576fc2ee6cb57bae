// Package countinfo holds what package counts leaves to floodgate's own
// exporters and Sources: each counts.Metric's names in Prometheus and
// OpenTelemetry, its kind, unit and help, the names of the labels every
// series has, and the values of counts.Sample.Label. The prommetrics and
// otelmetrics modules export by it; the core, the middlewares and
// redislimit label their Samples with its values.
package countinfo

import "github.com/floodgate-go/floodgate/counts"

// The results of counts.Requests.
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

// The reasons of counts.Evictions.
const (
	EvictIdle  = "idle"
	EvictBound = "bound"
	EvictFresh = "fresh"
)

// The kinds of counts.StoreErrors.
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

var infos = [...]Info{
	counts.Requests: {"floodgate_requests_total", "floodgate.requests", Counter, "{request}",
		"Requests decided, by result: allowed, denied, denied_global, shadow_denied, exempt, fail_open, fail_closed, fail_local, fail_error, abandoned.",
		true, "result", "floodgate.result"},
	counts.Keys: {"floodgate_keys", "floodgate.keys", Gauge, "{key}",
		"Clients' states held now.", true, "", ""},
	counts.KeysMax: {"floodgate_keys_max", "floodgate.keys.limit", Gauge, "{key}",
		"The bound on clients' states held (MaxKeys).", true, "", ""},
	counts.Evictions: {"floodgate_evictions_total", "floodgate.evictions", Counter, "{key}",
		"Clients' states removed, by reason: idle (IdleTTL), bound (spent, evicted at MaxKeys and remembered), fresh (evicted at MaxKeys, a new client's already).",
		true, "reason", "floodgate.eviction.reason"},
	counts.StoreCalls: {"floodgate_store_round_trips_total", "floodgate.store.round_trips", Counter, "{call}",
		"Round trips to a Store's state (Redis).", false, "", ""},
	counts.StoreErrors: {"floodgate_store_errors_total", "floodgate.store.errors", Counter, "{call}",
		"Calls to a Store's state that failed (each call of a failed batch), by kind: timeout, key (an error reply about one key's data), other.",
		false, "kind", "error.type"},
	counts.StoreBreakerOpen: {"floodgate_store_breaker_open", "floodgate.store.breaker.open", Gauge, "1",
		"1 while the breaker is open and the FailureMode decides, else 0.", false, "", ""},
	counts.StoreBreakerOpens: {"floodgate_store_breaker_opens_total", "floodgate.store.breaker.opens", Counter, "{open}",
		"Times the breaker opened.", false, "", ""},
	counts.StoreLeased: {"floodgate_store_leased_units_total", "floodgate.store.leased", Counter, "{unit}",
		"Units lease mode took from a Store beyond the requests that took them.", false, "", ""},
	counts.StoreReturned: {"floodgate_store_returned_units_total", "floodgate.store.returned", Counter, "{unit}",
		"Unspent leased units given back to a Store.", false, "", ""},
	counts.StoreLapsed: {"floodgate_store_lapsed_units_total", "floodgate.store.lapsed", Counter, "{unit}",
		"Unspent leased units whose time ran out before they could go back.", false, "", ""},
	counts.InFlight: {"floodgate_in_flight", "floodgate.in_flight", Gauge, "{request}",
		"Requests that hold a slot of an in-flight policy now, in this process.", true, "", ""},
}

// Of returns m's names and description. It panics for a Metric that is
// not one of package counts'.
func Of(m counts.Metric) Info { return infos[m] }

// All returns every Metric of package counts, in order.
func All() []counts.Metric {
	all := make([]counts.Metric, len(infos))
	for i := range all {
		all[i] = counts.Metric(i)
	}
	return all
}
