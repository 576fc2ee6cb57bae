package policy

import "fmt"

// This file ends a Builder's replacement of a middleware's Routes (the
// hot swap): Commit gives the kept policies their new rules and returns
// the retired ones to Close, and Abort closes what a failed build made.

// closer is what holds the entry's clients' state.
func (e *Entry) closer() Closer {
	if e.Slots != nil {
		return e.Slots
	}
	return e.SP
}

// Closer is what holds a policy's clients' state: its policy on the
// Store.
type Closer interface{ Close() error }

// Abort closes the Store policies the Builder made, after an error.
func (b *Builder) Abort() {
	for _, e := range b.fresh {
		e.closer().Close()
	}
}

// Commit gives each kept policy its new rule, by its SetRule (which Route
// checked it takes), and returns the policies of the replaced routes that
// no new route kept, for the caller to Close once the new routes serve. Between the first SetRule and the new routes' start, a
// request may meet a kept policy's new rule under the old routes: each
// policy's own decisions keep SetRule's contract throughout.
//
// It returns an error only if a SetRule refuses a rule that the Store's
// CheckRule took in Route; the policies before it have their new rules then.
func (b *Builder) Commit() ([]Closer, error) {
	for _, p := range b.rules {
		var err error
		if p.e.Slots != nil {
			err = p.e.Slots.SetLimit(p.limit)
		} else {
			err = p.e.SP.SetRule(p.rule)
		}
		if err != nil {
			return nil, fmt.Errorf("policy %q: %w", p.e.Spec.Name, err)
		}
	}
	var retired []Closer
	for _, e := range b.old {
		if !b.kept[e] {
			retired = append(retired, e.closer())
		}
	}
	return retired, nil
}

// Closers returns what holds the state of every policy of routes: their
// policies on the Store.
func Closers(routes []*Route) []Closer {
	var all []Closer
	for _, r := range routes {
		for _, s := range r.sets() {
			for _, e := range s.all() {
				all = append(all, e.closer())
			}
		}
	}
	return all
}
