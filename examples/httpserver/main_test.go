package main

import (
	"bufio"
	"context"
	"fmt"
	"github.com/floodgate-go/floodgate/internal/testmain"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// build compiles the server once per test run, as a user's go build would.
func build(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "httpserver")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "httpserver")
		out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// emulatorEnv names the user-mode emulator that runs this test binary, if
// any (make test-arm64 sets qemu-aarch64-static): the server it builds, for
// the same architecture, must run under it too.
const emulatorEnv = "FLOODGATE_EMULATOR"

// command is the built server with args, under the emulator if there is one.
func command(t *testing.T, args ...string) *exec.Cmd {
	if emu := os.Getenv(emulatorEnv); emu != "" {
		return exec.Command(emu, append([]string{build(t)}, args...)...)
	}
	return exec.Command(build(t), args...)
}

// TestMain removes the built binary once the tests are done, and fails
// them if they leave a goroutine behind.
func TestMain(m *testing.M) {
	testmain.RunThen(m, func() {
		if binary != "" {
			os.RemoveAll(filepath.Dir(binary))
		}
	})
}

// start runs the built server on a free loopback port and returns its URL.
// At the end of the test it stops the server with SIGTERM and checks that
// it exited cleanly, having printed nothing but its one line.
func start(t *testing.T, args ...string) string {
	t.Helper()
	return launch(t, args...).url
}

// startServer is start that also returns the metrics URL when args ask
// for -metrics: the second line the server prints.
func startServer(t *testing.T, args ...string) (url, metrics string) {
	t.Helper()
	s := launch(t, args...)
	return s.url, s.metrics
}

// server is one running server process.
type server struct {
	t            *testing.T
	cmd          *exec.Cmd
	out          *bufio.Reader
	stderr       *strings.Builder // read only once cmd has exited
	url, metrics string           // metrics is "" without -metrics
	done         bool             // stopped or killed
}

// launch runs the built server on a free loopback port and returns once
// it has said where it listens. Unless the test stops or kills it first,
// the test's end stops it as stop does.
func launch(t *testing.T, args ...string) *server {
	t.Helper()
	cmd := command(t, append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &server{t: t, cmd: cmd, out: bufio.NewReader(stdout), stderr: new(strings.Builder)}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fail := func(format string, args ...any) {
		t.Helper()
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf(format+"; stderr:\n%s", append(args, s.stderr.String())...)
	}
	readLine := func() string {
		line := make(chan string, 1)
		go func() {
			l, _ := s.out.ReadString('\n')
			line <- l
		}()
		select {
		case l := <-line:
			return l
		case <-time.After(time.Minute): // a bound on a broken build, not a wait for time to pass
			fail("no line from the server")
			return ""
		}
	}
	first := readLine()
	hostport, ok := strings.CutPrefix(strings.TrimSuffix(first, "\n"), "listening on ")
	if !ok || !strings.HasPrefix(hostport, "127.0.0.1:") || strings.HasSuffix(hostport, ":0") {
		fail("first line %q", first)
	}
	s.url = "http://" + hostport
	if slices.Contains(args, "-metrics") {
		second := readLine()
		m, ok := strings.CutPrefix(strings.TrimSuffix(second, "\n"), "metrics on ")
		if !ok || strings.HasSuffix(m, ":0") {
			fail("second line %q", second)
		}
		s.metrics = "http://" + m + "/metrics"
	}
	t.Cleanup(func() {
		if !s.done {
			s.stop()
		}
	})
	return s
}

// stop ends the server as an orchestrator would, with SIGTERM, and checks
// that it exited cleanly, having printed nothing but its lines.
func (s *server) stop() {
	s.t.Helper()
	s.done = true
	s.cmd.Process.Signal(syscall.SIGTERM)
	rest, _ := io.ReadAll(s.out)
	if err := s.cmd.Wait(); err != nil {
		s.t.Errorf("server exited with %v; stderr:\n%s", err, s.stderr.String())
	}
	if len(rest) > 0 {
		s.t.Errorf("server printed more than its lines: %q", rest)
	}
}

func get(t *testing.T, url string, xff string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestServerLimits: each endpoint allows -limit per client, with the
// RateLimit headers; the next is a 429 with a Retry-After of at least 1.
func TestServerLimits(t *testing.T) {
	url := start(t, "-limit", "3", "-period", "1h")
	for i := range 3 {
		resp := get(t, url+"/hello", "")
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
		if got := resp.Header.Get("RateLimit-Policy"); got != `"hello";q=3;w=3600` {
			t.Fatalf("RateLimit-Policy %q", got)
		}
		if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, fmt.Sprintf(`"hello";r=%d;t=`, 2-i)) {
			t.Fatalf("RateLimit %q", got)
		}
	}
	resp := get(t, url+"/hello", "")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("fourth: %d", resp.StatusCode)
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 || s > 1200 {
		t.Fatalf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
	if resp := get(t, url+"/other", ""); resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("RateLimit"), `"other";r=2;`) {
		t.Fatalf("/other: %d %q", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
}

// TestServerBudget: -budget 1000 on GET /spend?n=600, a streamed reply
// whose cost is known when it ends: the first two are served whole (the
// second's RateLimit shows the first's cost), the second leaves the client
// owing 200, and the third is refused; a bad n is a 400; without -budget
// there is no /spend.
func TestServerBudget(t *testing.T) {
	url := start(t, "-budget", "1000", "-period", "1h")
	for i, want := range []struct {
		status int
		rl     string
	}{{200, `"budget";r=1000;`}, {200, `"budget";r=400;`}, {429, `"budget";r=0;`}} {
		resp, err := http.Get(url + "/spend?n=600")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want.status || !strings.HasPrefix(resp.Header.Get("RateLimit"), want.rl) {
			t.Errorf("request %d: %d, RateLimit %q; want %d, %s", i+1, resp.StatusCode, resp.Header.Get("RateLimit"), want.status, want.rl)
		}
		if want.status == 200 && string(body) != "part 1 of 3\npart 2 of 3\npart 3 of 3\nspent 600\n" {
			t.Errorf("request %d: body %q", i+1, body)
		}
	}
	fresh := start(t, "-budget", "1000", "-period", "1h")
	for _, n := range []string{"-1", "x", ""} {
		if resp := get(t, fresh+"/spend?n="+n, ""); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("n=%q: %d, want 400", n, resp.StatusCode)
		}
	}
	if resp := get(t, start(t)+"/spend?n=1", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("without -budget: %d, want 404", resp.StatusCode)
	}
}

// TestServerSpoofing: with no trusted proxies, a client's X-Forwarded-For
// buys it nothing.
func TestServerSpoofing(t *testing.T) {
	url := start(t, "-limit", "2", "-period", "1h")
	passed := 0
	for i := range 6 {
		if get(t, url+"/hello", fmt.Sprintf("203.0.113.%d", i)).StatusCode == 200 {
			passed++
		}
	}
	if passed != 2 {
		t.Fatalf("%d passed, want 2", passed)
	}
}

// TestServerTrustedProxy: behind a trusted proxy (the test, on loopback),
// each forwarded client has its own allowance, and the IPv6 grouping
// follows -ipv6-prefix.
func TestServerTrustedProxy(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		want   int // requests passed for two addresses of one /64, two each
	}{{"64", 2}, {"128", 4}} {
		t.Run("ipv6-prefix="+tc.prefix, func(t *testing.T) {
			url := start(t, "-limit", "2", "-period", "1h", "-trusted-proxies", "127.0.0.0/8,::1/128", "-ipv6-prefix", tc.prefix)
			for _, c := range []string{"203.0.113.1", "203.0.113.2"} {
				for i := range 3 {
					if resp := get(t, url+"/hello", "198.51.100.1, "+c); (resp.StatusCode == 200) != (i < 2) {
						t.Fatalf("client %s, request %d: %d", c, i, resp.StatusCode)
					}
				}
			}
			passed := 0
			for _, c := range []string{"2001:db8::1", "2001:db8::1", "2001:db8::2", "2001:db8::2"} {
				if get(t, url+"/hello", c).StatusCode == 200 {
					passed++
				}
			}
			if passed != tc.want {
				t.Fatalf("%d passed, want %d", passed, tc.want)
			}
		})
	}
}

// TestServerBadFlags: a bad rule, CIDR or -metrics address, -lease-max
// without -redis, -lease-slots without -redis and -inflight or out of 0
// to 64, a Redis that does not answer or an unknown -redis-failure is an
// error at start, before the server says it listens, not a server that
// limits something else or serves without its metrics.
func TestServerBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-limit", "0"}, {"-trusted-proxies", "nonsense"}, {"-ipv6-prefix", "200"}, {"-metrics", "nonsense"},
		{"-lease-max", "64"}, {"-budget", "-1"}, {"-redis", "127.0.0.1:1"}, {"-redis", "127.0.0.1:1", "-redis-failure", "nonsense"},
		{"-inflight", "-1"}, {"-slot-ttl", "1s"}, {"-inflight", "2", "-slot-ttl", "1s"},
		{"-lease-slots", "2"}, {"-inflight", "2", "-lease-slots", "2"}, {"-redis", "127.0.0.1:1", "-lease-slots", "2"},
		{"-redis", "127.0.0.1:1", "-inflight", "2", "-lease-slots", "-1"}, {"-redis", "127.0.0.1:1", "-inflight", "2", "-lease-slots", "65"}} {
		out, err := command(t, append([]string{"-addr", "127.0.0.1:0"}, args...)...).CombinedOutput()
		if err == nil {
			t.Errorf("%v: exited 0: %s", args, out)
		}
		if strings.Contains(string(out), "listening on") {
			t.Errorf("%v: said it listens before failing: %s", args, out)
		}
		// A bad -lease-slots, or one without what it needs, is named
		// before Redis is asked anything.
		if slices.Contains(args, "-lease-slots") && !strings.Contains(string(out), "-lease-slots") {
			t.Errorf("%v: the error does not name -lease-slots: %s", args, out)
		}
	}
}

// TestServerMetrics: -metrics serves the middleware's counts on a
// listener of its own, in Prometheus's text format, with the figures of
// the requests made; the server's own port does not serve them.
func TestServerMetrics(t *testing.T) {
	url, metrics := startServer(t, "-limit", "2", "-period", "1h", "-metrics", "127.0.0.1:0")
	for range 3 {
		get(t, url+"/hello", "")
	}
	get(t, url+"/other", "")
	if resp := get(t, url+"/metrics", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the server's own port answers /metrics with %d", resp.StatusCode)
	}
	resp, err := http.Get(metrics)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d, %v", metrics, resp.StatusCode, err)
	}
	text := string(body)
	for _, want := range []string{
		`floodgate_requests_total{limiter="httpserver",policy="",result="allowed",route="GET /hello"} 2`,
		`floodgate_requests_total{limiter="httpserver",policy="hello",result="denied",route="GET /hello"} 1`,
		`floodgate_requests_total{limiter="httpserver",policy="",result="allowed",route="GET /other"} 1`,
		`floodgate_keys{limiter="httpserver",policy="hello",route="GET /hello"} 1`,
		`floodgate_keys_max{limiter="httpserver",policy="hello",route="GET /hello"} 1.048576e+06`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no %s in:\n%s", want, text)
		}
	}
	if strings.Contains(text, "127.0.0.1") {
		t.Error("the metrics carry a client's address")
	}
}

// TestServerInFlight: -inflight 2 lets a client hold two requests at
// once, on each endpoint apart; a third is a 429 with Retry-After 1 and
// no RateLimit headers, until one of the two ends (here its client goes
// away, which ends the handler). The server's in-flight gauge, on
// -metrics, says when the two are held and when one has ended, so the
// test waits on it rather than on requests of its own. GET /hold refuses
// an ms outside 0 to a minute.
func TestServerInFlight(t *testing.T) {
	url, metrics := startServer(t, "-inflight", "2", "-limit", "1000", "-period", "1h", "-metrics", "127.0.0.1:0")
	held := func() string {
		resp, err := http.Get(metrics)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "floodgate_in_flight{") && strings.Contains(line, `route="GET /hold"`) {
				return line[strings.LastIndexByte(line, ' ')+1:]
			}
		}
		return ""
	}
	var cancels []context.CancelFunc
	var done []chan struct{}
	for range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel) // before the server stops (cleanups run last first)
		req, _ := http.NewRequestWithContext(ctx, "GET", url+"/hold?ms=60000", nil)
		c := make(chan struct{})
		go func() {
			defer close(c)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		cancels, done = append(cancels, cancel), append(done, c)
	}
	for held() != "2" {
		runtime.Gosched()
	}
	third := get(t, url+"/hold?ms=0", "")
	if third.StatusCode != http.StatusTooManyRequests || third.Header.Get("Retry-After") != "1" || third.Header.Get("RateLimit") != "" {
		t.Fatalf("a third request while two are held: %d, Retry-After %q, RateLimit %q",
			third.StatusCode, third.Header.Get("Retry-After"), third.Header.Get("RateLimit"))
	}
	if resp := get(t, url+"/hello", ""); resp.StatusCode != 200 {
		t.Fatalf("/hello while /hold is full: %d", resp.StatusCode)
	}
	cancels[0]()
	<-done[0]
	for held() != "1" {
		runtime.Gosched()
	}
	if after := get(t, url+"/hold?ms=0", ""); after.StatusCode != 200 {
		t.Fatalf("after one held request ended: %d", after.StatusCode)
	}
	cancels[1]()
	<-done[1]
	for _, ms := range []string{"-1", "60001", "x"} {
		if resp := get(t, url+"/hold?ms="+ms, ""); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("ms=%s: %d, want 400", ms, resp.StatusCode)
		}
	}
}
