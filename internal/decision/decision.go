// Package decision holds the answer type that every algorithm package
// returns, so that the root package converts one type, not one per
// algorithm. Users see it as floodgate.Decision.
package decision

import (
	"errors"
	"math"
	"time"
)

// Never is the RetryAfter of a request that can never pass as asked.
const Never = time.Duration(math.MaxInt64)

// Decision is the outcome of one request; floodgate.Decision documents it.
// Its layout is floodgate.Decision's.
type Decision struct {
	Allowed    bool
	Unreached  bool // never set here: only a Store's failure mode sets it
	Limit      int64
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
	Owed       int64
}

// ErrDebtBound is the error of a charge that would leave a key owing more
// than its state can hold: nothing is charged then.
var ErrDebtBound = errors.New("the charge would leave the key owing more than its state can hold")
