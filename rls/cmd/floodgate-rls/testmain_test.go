package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/floodgate-go/floodgate/internal/testmain"
)

// TestMain fails the package's tests if they leave a goroutine behind.
// Run with FLOODGATE_TEST_ADS set, the binary is TestHeapBoundXDSPushes's
// ADS server instead (see startRemoteADS).
func TestMain(m *testing.M) {
	if dir := os.Getenv(childADS); dir != "" {
		if err := serveRemoteADS(dir); err != nil {
			fmt.Fprintln(os.Stderr, "the ADS server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	testmain.Run(m)
}
