package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// proc is a proxy under test, started as a child process and stopped by its PID.
type proc struct {
	name   string
	cmd    *exec.Cmd
	addr   string // host:port it listens on
	reload func() error
	dir    string
	waited chan struct{}
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func startProc(name, dir string, logf *os.File, env []string, bin string, args ...string) (*proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, dir: dir, waited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.waited) }()
	return p, nil
}

// waitReady polls GET url until it answers (any status) or 10 s pass.
func waitReady(ctx context.Context, p *proc, url string) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.waited:
			return fmt.Errorf("%s exited during start-up (see %s)", p.name, filepath.Join(p.dir, "log"))
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready on %s after 10 s", p.name, url)
}

// stop sends SIGTERM to the process (by PID), waits up to 5 s, then SIGKILLs it.
func (p *proc) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.waited:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.waited
	}
}
