//go:build unix

package redistest

import (
	"os"
	"syscall"
)

var stopSignal, continueSignal os.Signal = syscall.SIGSTOP, syscall.SIGCONT
