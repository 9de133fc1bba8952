package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// gatewayMetadata is the gateway's inject_metadata (-gateway-metadata).
var gatewayMetadata = true

// gatewayClient is the gateway's backend_client (-gateway-backend-client); "" omits it.
var gatewayClient string

// gatewayServer is the gateway's server (-gateway-server); "" omits it.
var gatewayServer = "direct"

// gatewayEnv is added to the gateway's environment (-gateway-env).
var gatewayEnv []string

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
	if gatewayServer != "" {
		fmt.Fprintf(&b, "server: %s\n", gatewayServer)
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
