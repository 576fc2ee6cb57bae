package bench

import (
	"fmt"
	"os"
	"testing"

	"github.com/floodgate-go/floodgate/internal/testmain"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests if they leave a goroutine behind,
// but for ulule's memory store's cleaner: ulule stops it only from a
// finalizer, when the garbage collector frees the store, and offers no
// way to stop it, so whether it is still running at the end depends on
// when the collector last ran.
//
// The folder of the services' binaries that the process built for
// itself, if it did (see binsEnv), goes when the tests end.
//
// Run with FLOODGATE_BENCH_ADS set, the binary is BenchmarkXDS's ADS
// server instead (see startADS).
func TestMain(m *testing.M) {
	if dir := os.Getenv(adsChild); dir != "" {
		if err := serveADS(dir); err != nil {
			fmt.Fprintln(os.Stderr, "the ADS server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	testmain.RunThen(m, removeServiceBinaries, goleak.IgnoreTopFunction("github.com/ulule/limiter/v3/drivers/store/memory.(*cleaner).Run"))
}
