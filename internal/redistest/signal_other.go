//go:build !unix

package redistest

import "os"

// No SIGSTOP here: Pause skips.
var stopSignal, continueSignal os.Signal
