package bench

import (
	"testing"

	"github.com/floodgate-go/floodgate/internal/testmain"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests if they leave a goroutine behind,
// but for ulule's memory store's cleaner: ulule stops it only from a
// finalizer, when the garbage collector frees the store, and offers no
// way to stop it, so whether it is still running at the end depends on
// when the collector last ran.
func TestMain(m *testing.M) {
	testmain.Run(m, goleak.IgnoreTopFunction("github.com/ulule/limiter/v3/drivers/store/memory.(*cleaner).Run"))
}
