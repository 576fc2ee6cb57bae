package bench

import (
	"time"

	"github.com/loov/hrtime"
)

// A latency sample is timed by a stamp: hrtime's time stamp counter, one
// plain read, where the processor has an invariant one, and elsewhere
// hrtime.Now, the monotonic clock in nanoseconds. hrtime reads no counter
// on arm64, where converting a count to a duration would divide by zero.
var tscStamps = hrtime.TSCSupported()

// stamp is a reading of the samples' clock.
type stamp int64

// stampNow reads the samples' clock.
func stampNow() stamp {
	if tscStamps {
		return stamp(hrtime.TSC())
	}
	return stamp(hrtime.Now())
}

// since is the reading from s to now, in the clock's own units: convert
// it with duration, outside the timed span.
func (s stamp) since() stamp { return stampNow() - s }

// duration converts an interval between two readings.
func (s stamp) duration() time.Duration {
	if tscStamps {
		return hrtime.Count(s).ApproxDuration()
	}
	return time.Duration(s)
}

// calibrateStamps makes the counter's first conversion, which measures
// its rate for milliseconds, before anything is timed.
func calibrateStamps() { stamp(1).duration() }
