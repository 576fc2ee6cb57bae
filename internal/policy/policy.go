// Package policy makes the floodgate.Limits that a middleware's named
// policies stand for: the part httplimit and grpclimit share.
package policy

import (
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Spec is one named policy: a rule and its algorithm ("" is the token
// bucket). The middlewares' own Policy types convert to it.
type Spec struct {
	Name      string
	Rule      floodgate.Rule
	Algorithm string
}

// Common is what every Limiter of one middleware shares.
type Common struct {
	Clock   floodgate.Clock
	MaxKeys int
	IdleTTL time.Duration
}

// Build makes one Limiter per spec and returns their Limits. It is an
// error to pass no spec or more than NewLimits takes, a name that valid
// refuses or that comes twice, or a rule that floodgate.New refuses. Every
// Limiter made is appended to all, so that the caller closes them however
// Build ends.
func Build(specs []Spec, c Common, valid func(string) bool, all *[]*floodgate.Limiter) (*floodgate.Limits, error) {
	if len(specs) == 0 {
		return nil, errors.New("no policies")
	}
	seen := make(map[string]bool, len(specs))
	ls := make([]*floodgate.Limiter, 0, len(specs))
	for _, s := range specs {
		if !valid(s.Name) {
			return nil, fmt.Errorf("policy name %q is not valid", s.Name)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("policy name %q used twice", s.Name)
		}
		seen[s.Name] = true
		l, err := floodgate.New(floodgate.Config{Algorithm: s.Algorithm, Rule: s.Rule,
			Clock: c.Clock, MaxKeys: c.MaxKeys, IdleTTL: c.IdleTTL})
		if err != nil {
			return nil, fmt.Errorf("policy %q: %v", s.Name, err)
		}
		*all = append(*all, l)
		ls = append(ls, l)
	}
	return floodgate.NewLimits(ls...)
}
