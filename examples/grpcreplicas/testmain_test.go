package grpcreplicas

import (
	"testing"

	"github.com/floodgate-go/floodgate/internal/testmain"
)

// TestMain fails the tests if they leave a goroutine behind: a server, a
// connection, a lease sweeper.
func TestMain(m *testing.M) { testmain.Run(m) }
