package bench

import (
	"math"
	"testing"
)

// TestSortTraces: each sample counts to the class of its leaf-most frame
// outside Go's standard library; a sample of the library alone is the
// runtime's.
func TestSortTraces(t *testing.T) {
	out := []byte(`File: floodgate-rls
Type: cpu
-----------+-------------------------------------------------------
      30ms   runtime.mallocgc
             runtime.newobject
             github.com/floodgate-go/floodgate/rls.(*Server).respond
             google.golang.org/grpc.(*Server).processUnaryRPC
-----------+-------------------------------------------------------
      20ms   syscall.Syscall
             internal/poll.(*FD).Write
             github.com/redis/go-redis/v9/internal/pool.(*Conn).WithWriter
             github.com/floodgate-go/floodgate/redislimit.(*batcher).exec
-----------+-------------------------------------------------------
      10ms   github.com/floodgate-go/floodgate/redislimit.keyHash
             github.com/floodgate-go/floodgate/rls.(*Server).decideStore
-----------+-------------------------------------------------------
      1.5s   golang.org/x/net/http2/hpack.(*Decoder).parseFieldIndexed
             google.golang.org/grpc/internal/transport.(*http2Server).operateHeaders
-----------+-------------------------------------------------------
      40ms   runtime.gcBgMarkWorker
-----------+-------------------------------------------------------
      10ms   main.run
-----------+-------------------------------------------------------
`)
	s, err := sortTraces(out)
	if err != nil {
		t.Fatal(err)
	}
	total := 30.0 + 20 + 10 + 1500 + 40 + 10
	want := cpuShares{grpc: 1500 / total, store: 30 / total, runtime: 40 / total, own: 40 / total}
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"grpc", s.grpc, want.grpc}, {"store", s.store, want.store}, {"runtime", s.runtime, want.runtime}, {"own", s.own, want.own}} {
		if math.Abs(c.got-c.want) > 1e-9 {
			t.Errorf("%s: %.4f, want %.4f", c.name, c.got, c.want)
		}
	}
	if _, err := sortTraces([]byte("File: x\n")); err == nil {
		t.Error("a profile of no samples: no error")
	}
}
