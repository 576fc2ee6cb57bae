package main

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestImage: the binary that the Dockerfile builds (its go build line,
// run here) is static, and serves as user 65534 from a directory it
// cannot write, on a configuration it cannot write either: the image's
// non-root, read-only run. The run needs root to change user, and is
// skipped without it.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the processes run in the full tests")
	}
	df, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	build := regexp.MustCompile(`(?m)^RUN cd rls && (CGO_ENABLED=0) go build (.*) -o /out/ratelimit \./cmd/floodgate-rls$`).FindStringSubmatch(string(df))
	if build == nil || !strings.Contains(string(df), "\nUSER 65534:65534\n") || !strings.Contains(string(df), `ENTRYPOINT ["/bin/ratelimit"]`) {
		t.Fatalf("the Dockerfile does not build /bin/ratelimit with CGO off, as user 65534:\n%s", df)
	}
	// A folder of its own under the system's temporary one: the test's
	// own is closed to other users, and user 65534 runs from here.
	dir, err := os.MkdirTemp("", "floodgate-rls-image-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755); os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "ratelimit")
	cmd := exec.Command("go", append(append([]string{"build"}, strings.Fields(build[2])...), "-o", bin, ".")...)
	cmd.Env = append(os.Environ(), build[1])
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the Dockerfile's build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Fatalf("the binary is not static: it has a %v header", p.Type)
		}
	}
	f.Close()

	if os.Geteuid() != 0 {
		t.Skip("the run as user 65534 needs root to change user")
	}
	// Everything the process sees is root's, and not writable by others.
	root := filepath.Join(dir, "runtime")
	if err := os.MkdirAll(filepath.Join(root, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "config", "api.yaml"), []byte("domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(root, "config"), root, dir} {
		if err := os.Chmod(d, 0o555); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(bin, 0o555); err != nil {
		t.Fatal(err)
	}
	r := startImage(t, bin, dir, "RUNTIME_ROOT="+root, "TMPDIR="+dir, "HOME="+dir)
	if code, left := xdsCall(t, r.client, "v"); code != pb.RateLimitResponse_OK || left != 4 {
		t.Fatalf("as user 65534: %v, %d left", code, left)
	}
	if _, err := r.client.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{}); err == nil {
		t.Fatal("an empty request was answered")
	}
}

// startImage runs bin as user and group 65534 in dir, as startReplica
// runs a replica.
func startImage(t *testing.T, bin, dir string, env ...string) *replica {
	t.Helper()
	old := replicaAttr
	replicaAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	replicaDir = dir
	defer func() { replicaAttr, replicaDir = old, "" }()
	return startReplica(t, bin, "", env...)
}
