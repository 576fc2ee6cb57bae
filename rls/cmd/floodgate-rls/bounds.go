package main

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate/rls"
)

// The bounds on a configuration that floodgate-rls sets where the
// environment sets none, beside config.DefaultMaxBytes and
// DefaultMaxDepth. 128 MiB kept is some 400,000 rules of one level, or
// 150,000 as Envoy Gateway writes them (a route and its rule, with long
// names), which a replica holds twice while a push replaces them,
// within the 512 MiB that Envoy Gateway asks for its rate-limit
// Deployment; a million rules of any shape are past it, and refused in
// under a second. A push not in force 8 s after it came is NACKed then,
// the load stopped, so that none goes unanswered for 10 s (its reading
// by gRPC comes before), and the largest push within the other bounds
// has room: 150,000 of Envoy Gateway's rules were in force 3.6 s after
// they were sent, paced beside the requests on a busy 2-core machine.
const (
	defaultMaxRules    = 1_000_000
	defaultMaxMemory   = 128 << 20
	defaultLoadTimeout = 8 * time.Second
)

// readBounds reads the bounds on a configuration, from files or a push,
// beyond FLOODGATE_CONFIG_MAX_BYTES: FLOODGATE_CONFIG_MAX_RULES and
// FLOODGATE_CONFIG_MAX_MEMORY.
func readBounds(getenv func(string) string, errs *[]error, o *rls.LoadOptions) {
	o.MaxRules, o.MaxMemory = defaultMaxRules, defaultMaxMemory
	for _, b := range []struct {
		name, what string
		v          *int
	}{{"FLOODGATE_CONFIG_MAX_RULES", "a whole number of rules, 1 or more", &o.MaxRules},
		{"FLOODGATE_CONFIG_MAX_MEMORY", "a whole number of bytes, 1 or more", &o.MaxMemory}} {
		if v := getenv(b.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				*errs = append(*errs, fmt.Errorf("%s=%q: %s", b.name, v, b.what))
			}
			*b.v = n
		}
	}
}

// nameBound is err, a configuration's load's, with the setting named
// when it is past a bound that one sets.
func nameBound(err error) error {
	for _, b := range []struct {
		err  error
		name string
	}{{rls.ErrTooLarge, "FLOODGATE_CONFIG_MAX_BYTES"}, {rls.ErrTooManyRules, "FLOODGATE_CONFIG_MAX_RULES"},
		{rls.ErrTooMuchMemory, "FLOODGATE_CONFIG_MAX_MEMORY"}} {
		if errors.Is(err, b.err) {
			return fmt.Errorf("%w (%s)", err, b.name)
		}
	}
	return err
}
