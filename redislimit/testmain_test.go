package redislimit

import (
	"context"
	"testing"

	"github.com/floodgate-go/floodgate/internal/testmain"
	"github.com/redis/go-redis/v9"
)

// quiet drops go-redis's log lines: the fault tests make it report every
// refused dial, and the tests check those failures themselves.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// TestMain quiets go-redis and fails the tests if they leave a goroutine
// behind.
func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	testmain.Run(m)
}
