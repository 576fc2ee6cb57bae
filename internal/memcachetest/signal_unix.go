//go:build unix

package memcachetest

import (
	"os"
	"syscall"
)

var stopSignal, continueSignal os.Signal = syscall.SIGSTOP, syscall.SIGCONT
