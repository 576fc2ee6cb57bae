//go:build !unix

package memcachetest

import "os"

// No SIGSTOP here: Pause skips.
var stopSignal, continueSignal os.Signal
