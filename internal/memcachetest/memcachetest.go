// Package memcachetest runs a real memcached for tests and benchmarks: on
// a free loopback port, with 64 MB of memory and no UDP, stopped when the
// test ends. It can pause, kill and restart the server, to test what a
// client does when memcached fails or forgets.
//
// Where memcached is not installed, Start skips the test with a message
// that names Debian's package, unless FLOODGATE_REQUIRE_MEMCACHED=1,
// under which it fails the test instead (CI sets it).
package memcachetest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Require is the environment variable that turns a missing memcached
// from a skip into a failure.
const Require = "FLOODGATE_REQUIRE_MEMCACHED"

// Server is one memcached process.
type Server struct {
	tb    testing.TB
	bin   string
	port  int
	extra []string
	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{} // closed when cmd has exited
	log   *strings.Builder
}

// Find returns the path of memcached, or an error that says how to get
// it.
func Find() (string, error) {
	bin, err := exec.LookPath("memcached")
	if err != nil {
		return "", errors.New("memcached not found: install Debian's memcached package (apt-get install memcached) to run the memcached tests")
	}
	return bin, nil
}

// Start starts a server on a free loopback port and stops it when tb
// ends. extra are arguments beyond the defaults (such as "-M", to refuse
// stores rather than evict when memory is full).
func Start(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	bin, err := Find()
	if err != nil {
		if os.Getenv(Require) == "1" {
			tb.Fatalf("%v (%s=1)", err, Require)
		}
		tb.Skip(err)
	}
	s := &Server{tb: tb, bin: bin, extra: extra}
	for attempt := 0; ; attempt++ {
		s.port = freePort(tb)
		err := s.start()
		if err == nil {
			break
		}
		if attempt == 4 {
			tb.Fatalf("memcachetest: %v", err)
		}
	}
	tb.Cleanup(s.Stop)
	return s
}

// Addr is the server's address, host:port on loopback; it stays the same
// across Restart.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

func freePort(tb testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("memcachetest: no free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// start runs the server on s.port and returns once it answers "version".
func (s *Server) start() error {
	args := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", "0", "-m", "64"}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "root") // memcached refuses to run as root otherwise
	}
	args = append(args, s.extra...)
	cmd := exec.Command(s.bin, args...)
	log := &strings.Builder{}
	var lmu sync.Mutex
	cmd.Stdout = writerFunc(func(p []byte) (int, error) { lmu.Lock(); defer lmu.Unlock(); return log.Write(p) })
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := ping(s.Addr()); err == nil {
			break
		}
		select {
		case <-done:
			lmu.Lock()
			defer lmu.Unlock()
			return fmt.Errorf("memcached on port %d exited before it was ready:\n%s", s.port, log.String())
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("memcached on port %d was not ready after 20s", s.port)
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.mu.Lock()
	s.cmd, s.done, s.log = cmd, done, log
	s.mu.Unlock()
	return nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// ping asks addr for its version.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("version\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "VERSION ") {
		return fmt.Errorf("memcached answered %q to version", line)
	}
	return nil
}

func (s *Server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.tb.Fatalf("memcachetest: the server is not running")
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.tb.Fatalf("memcachetest: %v: %v", sig, err)
	}
}

// Pause stops the server's process (SIGSTOP): it keeps its connections
// and its port, and answers nothing until Resume. Where there is no
// SIGSTOP (Windows), it skips the test.
func (s *Server) Pause() {
	if stopSignal == nil {
		s.tb.Skip("memcachetest: no SIGSTOP on this platform")
	}
	s.signal(stopSignal)
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.signal(continueSignal) }

// Kill ends the server at once (SIGKILL) and waits for it to exit: every
// item is gone.
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

// Stop ends the server, paused or not; the test's cleanup calls it.
func (s *Server) Stop() { s.Kill() }

// Restart starts a new, empty server on the same port, after killing the
// running one if there is one: every count it held is lost, as when a
// memcached restarts in production.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Kill()
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond) // the port may linger a moment
	}
	s.tb.Fatalf("memcachetest: restart: %v", err)
}

// Running reports whether the server's process runs.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Flush empties the server (flush_all): every item is gone.
func (s *Server) Flush() {
	s.tb.Helper()
	c, err := net.DialTimeout("tcp", s.Addr(), 5*time.Second)
	if err != nil {
		s.tb.Fatalf("memcachetest: flush: %v", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("flush_all\r\n")); err != nil {
		s.tb.Fatalf("memcachetest: flush: %v", err)
	}
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.HasPrefix(line, "OK") {
		s.tb.Fatalf("memcachetest: flush_all answered %q, %v", line, err)
	}
}
