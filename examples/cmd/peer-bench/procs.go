package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentserve/sessionaffinity/examples/fakevllm"
)

// backendSrv is one fakevllm simulator on its own loopback listener, in this process, so
// that it can be killed (listener and connections closed, like a crash) and restarted on
// the same address.
type backendSrv struct {
	id, addr string
	cfg      fakevllm.Config
	opts     []fakevllm.Option
	sim      *fakevllm.Server
	mu       sync.Mutex
	srv      *http.Server
	done     chan struct{}
}

func startBackend(id string, cfg fakevllm.Config, opts ...fakevllm.Option) (*backendSrv, error) {
	cfg.ID = id
	sim, err := fakevllm.New(cfg, opts...)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &backendSrv{id: id, addr: ln.Addr().String(), cfg: cfg, opts: opts, sim: sim}
	b.serve(ln)
	return b, nil
}

func (b *backendSrv) url() string { return "http://" + b.addr }

func (b *backendSrv) serve(ln net.Listener) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.srv = &http.Server{Handler: b.sim, ReadHeaderTimeout: 10 * time.Second}
	b.done = make(chan struct{})
	srv, done := b.srv, b.done
	go func() { _ = srv.Serve(ln); close(done) }()
}

// kill closes the listener and every connection at once.
func (b *backendSrv) kill() {
	b.mu.Lock()
	srv, done := b.srv, b.done
	b.srv = nil
	b.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
		<-done
	}
}

// restart serves again on the same address (retrying while the port is in TIME_WAIT)
// with a fresh simulator: like a restarted vLLM, its prefix cache is empty.
func (b *backendSrv) restart() error {
	sim, err := fakevllm.New(b.cfg, b.opts...)
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.sim = sim
	b.mu.Unlock()
	for range 50 {
		var ln net.Listener
		if ln, err = net.Listen("tcp", b.addr); err == nil {
			b.serve(ln)
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

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

// cpuTicks returns utime+stime (clock ticks) of the process and of its live children
// (nginx and HAProxy workers), read from /proc/<pid>/stat.
func (p *proc) cpuTicks() (uint64, error) {
	pids := append([]int{p.cmd.Process.Pid}, childPIDs(p.cmd.Process.Pid)...)
	var total uint64
	for _, pid := range pids {
		t, err := statTicks(pid)
		if err != nil {
			return 0, err
		}
		total += t
	}
	return total, nil
}

// threadCounters returns, summed over every thread of the process and of its live
// children, the context switches (voluntary and involuntary, /proc/<pid>/task/*/status)
// and the time on a CPU (/proc/<pid>/task/*/schedstat, nanoseconds: finer than the
// clock ticks of cpuTicks). Threads that exit between two readings drop out.
func (p *proc) threadCounters() (switches uint64, cpu time.Duration) {
	for _, pid := range append([]int{p.cmd.Process.Pid}, childPIDs(p.cmd.Process.Pid)...) {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
		for _, task := range tasks {
			if data, err := os.ReadFile(filepath.Join(task, "status")); err == nil {
				switches += parseSwitches(string(data))
			}
			if data, err := os.ReadFile(filepath.Join(task, "schedstat")); err == nil {
				cpu += parseSchedstat(string(data))
			}
		}
	}
	return switches, cpu
}

// parseSwitches returns voluntary_ctxt_switches + nonvoluntary_ctxt_switches of a
// /proc status file (0 for a field that is missing).
func parseSwitches(status string) uint64 {
	var n uint64
	for line := range strings.Lines(status) {
		for _, key := range [...]string{"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"} {
			if v, ok := strings.CutPrefix(line, key); ok {
				k, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				n += k
			}
		}
	}
	return n
}

// parseSchedstat returns the first field of a /proc schedstat file: time spent on a CPU
// in nanoseconds (0 if unreadable).
func parseSchedstat(s string) time.Duration {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0
	}
	ns, _ := strconv.ParseUint(f[0], 10, 64)
	return time.Duration(ns)
}

func statTicks(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which is in parentheses and may hold spaces).
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	ut, _ := strconv.ParseUint(f[11], 10, 64) // field 14: utime
	st, _ := strconv.ParseUint(f[12], 10, 64) // field 15: stime
	return ut + st, nil
}

func childPIDs(parent int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(parent) {
			out = append(out, pid)
		}
	}
	return out
}

// gatewayMetadata is the gateway's inject_metadata (-gateway-metadata).
var gatewayMetadata = true

// gatewayClient is the gateway's backend_client (-gateway-backend-client); "" omits it.
var gatewayClient string

// gatewayEnv is added to the gateway's environment (-gateway-env).
var gatewayEnv []string

// clockTicks is USER_HZ: 100 on every Linux this runs on.
const clockTicks = 100

// startGateway writes the gateway config and starts the affinity-gateway binary.
func startGateway(ctx context.Context, bin, dir string, port int, backends []*backendSrv, extraArgs ...string) (*proc, error) {
	cfgPath := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(cfgPath, []byte(gatewayConfig(port, backends)), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		return nil, err
	}
	args := append([]string{"-config", cfgPath, "-log-level", "warn"}, extraArgs...)
	p, err := startProc("gateway", dir, logf, gatewayEnv, bin, args...)
	if err != nil {
		return nil, err
	}
	p.addr = fmt.Sprintf("127.0.0.1:%d", port)
	p.reload = func() error { return p.cmd.Process.Signal(syscall.SIGHUP) }
	return p, waitReady(ctx, p, "http://"+p.addr+"/healthz")
}

func gatewayConfig(port int, backends []*backendSrv) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: 127.0.0.1:%d\nbackends:\n", port)
	for _, be := range backends {
		fmt.Fprintf(&b, "  - {id: %s, url: %q}\n", be.id, be.url())
	}
	b.WriteString("session_headers: [X-Session-ID]\n")
	if gatewayClient != "" {
		fmt.Fprintf(&b, "backend_client: %s\n", gatewayClient)
	}
	if !gatewayMetadata {
		b.WriteString("inject_metadata: false\n")
	}
	b.WriteString("health: {enabled: true, interval_seconds: 1, timeout_seconds: 1, failure_threshold: 2, success_threshold: 2, passive_recheck_seconds: 1}\n")
	return b.String()
}

func rewriteGateway(p *proc, port int, backends []*backendSrv) error {
	return os.WriteFile(filepath.Join(p.dir, "gateway.yaml"), []byte(gatewayConfig(port, backends)), 0o600)
}

// startHAProxy runs HAProxy in master-worker mode (reload: SIGUSR2 to the master) with
// consistent hashing on X-Session-ID and active checks as close as possible to the
// gateway's (1 s interval, 2 to fall, 2 to rise).
func startHAProxy(ctx context.Context, dir string, port int, backends []*backendSrv) (*proc, error) {
	cfgPath := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfgPath, []byte(haproxyConfig(port, backends)), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		return nil, err
	}
	p, err := startProc("haproxy", dir, logf, nil, "haproxy", "-W", "-db", "-f", cfgPath)
	if err != nil {
		return nil, err
	}
	p.addr = fmt.Sprintf("127.0.0.1:%d", port)
	p.reload = func() error { return p.cmd.Process.Signal(syscall.SIGUSR2) }
	return p, waitReady(ctx, p, "http://"+p.addr+"/health")
}

func haproxyConfig(port int, backends []*backendSrv) string {
	var b strings.Builder
	fmt.Fprintf(&b, `global
    nbthread 2
    maxconn 4096
defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    retries 1
    option redispatch 1
    option http-keep-alive
frontend fe
    bind 127.0.0.1:%d
    default_backend be
backend be
    balance hdr(X-Session-ID)
    hash-type consistent
    option httpchk GET /health
    default-server check inter 1s fall 2 rise 2
`, port)
	for _, be := range backends {
		fmt.Fprintf(&b, "    server %s %s\n", be.id, be.addr)
	}
	return b.String()
}

func rewriteHAProxy(p *proc, port int, backends []*backendSrv) error {
	return os.WriteFile(filepath.Join(p.dir, "haproxy.cfg"), []byte(haproxyConfig(port, backends)), 0o600)
}

// startNginx runs nginx in the foreground (reload: SIGHUP to the master) with
// consistent hashing on X-Session-ID; nginx (open source) has passive health checks
// only: max_fails=1 fail_timeout=2s, and retries the next upstream on connection errors.
func startNginx(ctx context.Context, dir string, port int, backends []*backendSrv) (*proc, error) {
	cfgPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(cfgPath, []byte(nginxConfig(dir, port, backends)), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		return nil, err
	}
	p, err := startProc("nginx", dir, logf, nil, "nginx", "-p", dir, "-c", cfgPath, "-e", "stderr")
	if err != nil {
		return nil, err
	}
	p.addr = fmt.Sprintf("127.0.0.1:%d", port)
	p.reload = func() error { return p.cmd.Process.Signal(syscall.SIGHUP) }
	return p, waitReady(ctx, p, "http://"+p.addr+"/health")
}

func nginxConfig(dir string, port int, backends []*backendSrv) string {
	var b strings.Builder
	fmt.Fprintf(&b, `daemon off;
master_process on;
worker_processes 2;
pid %[1]s/nginx.pid;
error_log stderr warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    upstream be {
        hash $http_x_session_id consistent;
        keepalive 256;
`, dir)
	for _, be := range backends {
		fmt.Fprintf(&b, "        server %s max_fails=1 fail_timeout=2s;\n", be.addr)
	}
	fmt.Fprintf(&b, `    }
    server {
        listen 127.0.0.1:%d;
        location / {
            proxy_pass http://be;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_next_upstream error timeout;
            proxy_buffering off;
        }
    }
}
`, port)
	return b.String()
}

func rewriteNginx(p *proc, port int, backends []*backendSrv) error {
	return os.WriteFile(filepath.Join(p.dir, "nginx.conf"), []byte(nginxConfig(p.dir, port, backends)), 0o600)
}
