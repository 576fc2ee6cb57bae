package memcachelimit

import (
	"testing"

	"github.com/floodgate-go/floodgate/internal/testmain"
)

// TestMain fails the tests if they leave a goroutine behind.
func TestMain(m *testing.M) { testmain.Run(m) }
