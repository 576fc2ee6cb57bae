// Package redistest runs a real redis-server for tests and benchmarks: on
// a free loopback port, with no persistence, stopped when the test ends. It
// can pause, kill and restart the server, to test what a client does when
// Redis fails.
//
// Where redis-server is not installed, Start skips the test with a message
// that names Debian's package, unless FLOODGATE_REQUIRE_REDIS=1, under
// which it fails the test instead (CI sets it).
package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is one redis-server process.
type Server struct {
	Addr string // host:port on loopback

	tb    testing.TB
	bin   string
	port  int
	extra []string // arguments beyond the defaults (a cluster node's)
	argv  []string // with args, the whole command line (a Sentinel's), not the defaults
	ready string   // the line that says it is ready, if not "Ready to accept connections"
	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{} // closed when cmd has exited
}

// Require is the environment variable that turns a missing redis-server
// from a skip into a failure.
const Require = "FLOODGATE_REQUIRE_REDIS"

// Find returns the path of redis-server, or an error that says how to get
// it.
func Find() (string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server not found: install Debian's redis-server package (apt-get install redis-server) to run the Redis tests")
	}
	return bin, nil
}

// Start starts a server on a free loopback port and stops it when tb ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return launch(tb, mustFind(tb), nil)
}

// mustFind is redis-server's path; without one it skips the test, or,
// with FLOODGATE_REQUIRE_REDIS=1, fails it.
func mustFind(tb testing.TB) string {
	tb.Helper()
	bin, err := Find()
	if err != nil {
		if os.Getenv(Require) == "1" {
			tb.Fatalf("%v (%s=1)", err, Require)
		}
		tb.Skip(err)
	}
	return bin
}

// launch starts bin on a free loopback port, with the arguments extra
// returns for that port (if extra is not nil) after the defaults, trying
// another port if the first is taken; and stops it when tb ends.
func launch(tb testing.TB, bin string, extra func(port int) []string) *Server {
	tb.Helper()
	s := &Server{tb: tb, bin: bin}
	for attempt := 0; ; attempt++ {
		s.port = freePort(tb)
		if extra != nil {
			s.extra = extra(s.port)
		}
		err := s.start()
		if err == nil {
			break
		}
		if attempt == 4 {
			tb.Fatalf("redistest: %v", err)
		}
	}
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	tb.Cleanup(s.Stop)
	return s
}

func freePort(tb testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: no free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// start runs the server on s.port and returns once it accepts connections.
func (s *Server) start() error {
	args := []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no", "--loglevel", "notice"}
	args = append(args, s.extra...)
	if s.argv != nil {
		args = s.argv
	}
	marker := "Ready to accept connections"
	if s.ready != "" {
		marker = s.ready
	}
	cmd := exec.Command(s.bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return err
	}
	ready := make(chan struct{})
	done := make(chan struct{})
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			if !signalled {
				log.WriteString(sc.Text() + "\n")
				if strings.Contains(sc.Text(), marker) {
					signalled = true
					close(ready)
				}
			}
		}
		_, _ = io.Copy(io.Discard, out) // a line too long for the scanner
		_ = cmd.Wait()
		close(done)
	}()
	select {
	case <-ready:
	case <-done:
		return fmt.Errorf("redis-server on port %d exited before it was ready:\n%s", s.port, log.String())
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("redis-server on port %d was not ready after 20s:\n%s", s.port, log.String())
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return nil
}

func (s *Server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.tb.Fatalf("redistest: the server is not running")
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.tb.Fatalf("redistest: %v: %v", sig, err)
	}
}

// Pause stops the server's process (SIGSTOP): it keeps its connections and
// its port, and answers nothing until Resume. Where there is no SIGSTOP
// (Windows), it skips the test.
func (s *Server) Pause() {
	if stopSignal == nil {
		s.tb.Skip("redistest: no SIGSTOP on this platform")
	}
	s.signal(stopSignal)
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.signal(continueSignal) }

// Kill ends the server at once (SIGKILL) and waits for it to exit. With no
// persistence, its data and its script cache are gone.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Restart starts a new, empty server on the same port after Kill.
func (s *Server) Restart() {
	s.Kill()
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = s.start(); err == nil {
			return
		}
	}
	s.tb.Fatalf("redistest: restart: %v", err)
}

// Flush empties the server (FLUSHALL): every key is gone, its scripts
// stay.
func (s *Server) Flush() {
	s.tb.Helper()
	c, err := net.DialTimeout("tcp", s.Addr, 5*time.Second)
	if err != nil {
		s.tb.Fatalf("redistest: flush: %v", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("*1\r\n$8\r\nFLUSHALL\r\n")); err != nil {
		s.tb.Fatalf("redistest: flush: %v", err)
	}
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		s.tb.Fatalf("redistest: FLUSHALL answered %q, %v", line, err)
	}
}

// Stop ends the server, paused or not; the test's cleanup calls it.
func (s *Server) Stop() { s.Kill() }
