// Package redistest starts a real redis-server for tests: on a free 127.0.0.1 port,
// without persistence, stopped by its PID when the test ends. Under CI=true a missing
// redis-server binary fails the test; otherwise the test is skipped.
//
// It is a test helper (it takes a testing.TB); import it from _test files only.
package redistest

import (
	"bufio"
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

// startTimeout bounds how long a redis-server may take to report that it is ready.
const startTimeout = 10 * time.Second

// Server is one redis-server process. Its methods are safe for concurrent use.
type Server struct {
	tb   testing.TB
	bin  string
	port int

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Start starts redis-server on a free loopback port and registers its stop with
// tb.Cleanup. Missing binary: tb.Fatal under CI=true, tb.Skip otherwise.
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("redistest: redis-server not found (CI=true: .ci/run installs it): %v", err)
		}
		tb.Skipf("redistest: redis-server not installed: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: free port: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	s := &Server{tb: tb, bin: bin, port: port}
	s.Restart()
	tb.Cleanup(s.Stop)
	return s
}

// Addr returns "127.0.0.1:port"; it stays the same across Restart.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Stop kills the server (SIGKILL to its PID: no shutdown work, like a crash) and waits
// for it. Idempotent.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart starts the server again on the same port (stopping it first if it runs), with
// an empty data set, and returns once it accepts connections.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command(s.bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "yes", "--loglevel", "notice")
	out, err := cmd.StdoutPipe()
	if err != nil {
		s.tb.Fatalf("redistest: %v", err)
	}
	if err := cmd.Start(); err != nil {
		s.tb.Fatalf("redistest: start redis-server: %v", err)
	}
	ready := make(chan error, 1)
	go func() { // reads the log until ready, then discards it until the process ends
		sc := bufio.NewScanner(out)
		var tail []string
		for sc.Scan() {
			line := sc.Text()
			if strings.Contains(line, "Ready to accept connections") {
				ready <- nil
				for sc.Scan() {
				}
				return
			}
			tail = append(tail, line)
		}
		ready <- fmt.Errorf("redis-server exited before ready: %s", strings.Join(tail, "\n"))
	}()
	select {
	case err := <-ready:
		if err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			s.tb.Fatalf("redistest: %v", err)
		}
	case <-time.After(startTimeout):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		s.tb.Fatalf("redistest: redis-server not ready after %v", startTimeout)
	}
	s.cmd = cmd
}
