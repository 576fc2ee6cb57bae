package redislimit

import "github.com/floodgate-go/floodgate/internal/countinfo"

// result is what decided a request, as AppendCounts counts it: the index
// of its counter in Store.results.
type result uint8

const (
	resAllowed result = iota
	resDenied
	resFailOpen
	resFailClosed
	resFailLocal
	resFailError
	resAbandoned
	numResults
)

// resultLabels are the results' labels, in counts' names.
var resultLabels = [numResults]string{
	resAllowed:    countinfo.Allowed,
	resDenied:     countinfo.Denied,
	resFailOpen:   countinfo.FailOpen,
	resFailClosed: countinfo.FailClosed,
	resFailLocal:  countinfo.FailLocal,
	resFailError:  countinfo.FailError,
	resAbandoned:  countinfo.Abandoned,
}

// decided is the result of a decision that Redis or a lease made.
func decided(allowed bool) result {
	if allowed {
		return resAllowed
	}
	return resDenied
}
