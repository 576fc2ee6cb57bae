package config

import (
	"strings"
	"time"
)

// Unit is a rule's unit of time, as envoyproxy/ratelimit names them: its
// windows are aligned to the Unix epoch, a month is 30 days and a year
// 365.
type Unit int

// The units, in the order of Envoy's RateLimitResponse.RateLimit.Unit
// (whose 0 is UNKNOWN).
const (
	Second Unit = iota + 1
	Minute
	Hour
	Day
	Month
	Year
	Week
)

var unitNames = map[string]Unit{
	"SECOND": Second, "MINUTE": Minute, "HOUR": Hour, "DAY": Day,
	"WEEK": Week, "MONTH": Month, "YEAR": Year,
}

// ParseUnit reads a unit's name in any case ("second", "MINUTE"), as
// envoyproxy/ratelimit does.
func ParseUnit(s string) (Unit, bool) {
	u, ok := unitNames[strings.ToUpper(s)]
	return u, ok
}

// Duration is the unit's length: a month is 30 days and a year 365, as
// envoyproxy/ratelimit counts them.
func (u Unit) Duration() time.Duration {
	const day = 24 * time.Hour
	switch u {
	case Second:
		return time.Second
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	case Day:
		return day
	case Week:
		return 7 * day
	case Month:
		return 30 * day
	case Year:
		return 365 * day
	}
	return 0
}

// String is the unit's name as Envoy's enum spells it.
func (u Unit) String() string {
	for name, v := range unitNames {
		if v == u {
			return name
		}
	}
	return "UNKNOWN"
}
