package redislimit

import "github.com/floodgate-go/floodgate/counts"

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
	resAllowed:    counts.Allowed,
	resDenied:     counts.Denied,
	resFailOpen:   counts.FailOpen,
	resFailClosed: counts.FailClosed,
	resFailLocal:  counts.FailLocal,
	resFailError:  counts.FailError,
	resAbandoned:  counts.Abandoned,
}

// decided is the result of a decision that Redis or a lease made.
func decided(allowed bool) result {
	if allowed {
		return resAllowed
	}
	return resDenied
}
