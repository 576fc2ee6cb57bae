package shardlog

import "github.com/floodgate-go/floodgate/internal/decision"

// Never is the RetryAfter of a request that can never pass: a cost below 1
// or above the limit, or a clock reading too far before the log's origin.
const Never = decision.Never

// Decision is the outcome of one request: whether it passed, the limit
// that applied, the whole requests left, the wait before the same request
// could pass, and the wait until the key is back to full capacity.
type Decision = decision.Decision
