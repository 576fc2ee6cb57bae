package memcachelimit

import (
	"encoding/binary"
	"fmt"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/storekit"
)

// maxValue is the most bytes a key's state may take: memcached's default
// item size (1 MiB, its -I) less room for the item's key and header.
const maxValue = 1<<20 - 4<<10

// newMachine is storekit.NewMachine, and a refusal of the sliding log's
// rules whose state could outgrow one memcached item: the log keeps an
// entry per instant of admitted cost in its window, each its age and
// cost, up to Limit of them. A state memcached refused to store would
// fail every admission of its key at the limit's edge, so such a rule
// is an error here, before any request.
func newMachine(algorithm string, rule floodgate.Rule) (*storekit.Machine, error) {
	m, err := storekit.NewMachine(algorithm, rule)
	if err != nil {
		return nil, err
	}
	if algorithm == floodgate.SlidingLog {
		entry := uvarintLen(uint64(rule.Period)) + uvarintLen(uint64(rule.Limit))
		if rule.Limit > (maxValue-64)/int64(entry) {
			return nil, fmt.Errorf("memcachelimit: a sliding_log of %d per %v could keep a state of up to %d entries of %d bytes, "+
				"past what one memcached item holds (%d bytes): use sliding_counter, or a smaller Limit",
				rule.Limit, rule.Period, rule.Limit, entry, maxValue)
		}
	}
	return m, nil
}

// uvarintLen is the length of v as a uvarint.
func uvarintLen(v uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], v)
}
