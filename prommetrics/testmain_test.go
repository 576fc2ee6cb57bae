package prommetrics_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if they leave a goroutine behind.
// It uses goleak directly: the core's internal packages are not this
// module's to import.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
