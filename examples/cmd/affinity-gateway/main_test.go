package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// until retries fn (which must not block for long) until it reports true or 10 s pass.
func until(t *testing.T, what string, fn func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); runtime.Gosched() {
		if fn() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// The command reloads its config file on SIGHUP (its "config reloaded" line says
// trigger=sighup), and on SIGTERM drains and saves the binding table to binding_snapshot.
func TestRunReloadsOnSIGHUPAndSavesBindingsOnSIGTERM(t *testing.T) {
	var urls []string
	for range 2 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{}`))
		}))
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	dir := t.TempDir()
	cfgPath, snap := filepath.Join(dir, "gateway.yaml"), filepath.Join(dir, "bindings.snap")
	write := func(id, url string) {
		cfg := fmt.Sprintf("listen: %s\nbinding_snapshot: %s\nbackends:\n  - {id: %s, url: %q}\n", addr, snap, id, url)
		require.NoError(t, os.WriteFile(cfgPath, []byte(cfg), 0o600))
	}
	write("b0", urls[0])

	done := make(chan error, 1)
	var logs lockedBuffer
	go func() { done <- run([]string{"-config", cfgPath, "-log-level", "info"}, &logs) }()
	backendOf := func() string {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(`{}`))
		req.Header.Set("X-Session-ID", "s1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return ""
		}
		resp.Body.Close()
		return resp.Header.Get(gateway.HeaderBackend)
	}
	until(t, "the gateway to serve", func() bool { return backendOf() == "b0" })

	write("b1", urls[1])
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	until(t, "the reload to take effect", func() bool { return backendOf() == "b1" })
	// The new routing serves before the reload logs its line (a CI run read the log in
	// between): wait for the line, still required.
	until(t, "the reload's log line", func() bool { return strings.Contains(logs.String(), `msg="config reloaded" trigger=sighup`) })

	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	require.NoError(t, <-done)
	f, err := os.Open(snap)
	require.NoError(t, err)
	defer f.Close()
	s, err := affinity.New(affinity.Config{})
	require.NoError(t, err)
	n, err := s.Restore(f)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	id, ok := s.Lookup("s1", "")
	require.True(t, ok)
	require.Equal(t, "b1", id)
}

// A config path that is a FIFO is refused at start, at once, naming what it is. (Before:
// the start blocked until something wrote to it: tester32 #3.)
func TestRunRefusesAFIFOConfig(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "gateway.yaml")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	err := run([]string{"-config", fifo}, io.Discard)
	require.ErrorIs(t, err, gateway.ErrConfigNotRegular)
	require.Contains(t, err.Error(), "a named pipe (FIFO), not a regular file")
}

// -h prints the usage under the command's own name and is not an error.
func TestUsageNamesTheCommand(t *testing.T) {
	var out strings.Builder
	require.NoError(t, run([]string{"-h"}, &out))
	require.Contains(t, out.String(), "Usage of affinity-gateway:")
	require.NotContains(t, out.String(), "Usage of gateway:")
	require.Contains(t, out.String(), "-config")
}

// The startup line logs the effective health.enabled as a boolean, not a pointer. The
// address to bind is taken (listen, or admin_listen with listen free), so run logs the
// startup line, fails to bind, and never says it is listening (small2: with admin_listen
// taken it used to log "gateway listening" before it exited).
func TestStartupLogShowsActiveHealthAsBool(t *testing.T) {
	tests := []struct {
		name, yaml, want string
		adminTaken       bool
	}{
		{"unset means on", "", "active_health=true", false},
		{"on", "health: {enabled: true}\n", "active_health=true", false},
		{"off", "health: {enabled: false}\n", "active_health=false", false},
		{"admin_listen taken", "", "active_health=true", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			busy, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer busy.Close()
			listen, wantErr := busy.Addr().String(), "gateway: listen"
			if tt.adminTaken {
				listen, wantErr = "127.0.0.1:0", "gateway: admin_listen"
				tt.yaml += fmt.Sprintf("admin_listen: %s\n", busy.Addr())
			}
			cfgPath := filepath.Join(t.TempDir(), "gateway.yaml")
			cfg := fmt.Sprintf("listen: %s\nbackends:\n  - {id: b0, url: \"http://127.0.0.1:1\"}\n%s", listen, tt.yaml)
			require.NoError(t, os.WriteFile(cfgPath, []byte(cfg), 0o600))
			var out strings.Builder
			err = run([]string{"-config", cfgPath}, &out)
			require.Error(t, err)
			line := ""
			for l := range strings.Lines(out.String()) {
				if strings.Contains(l, "gateway starting") {
					line = l
				}
			}
			require.ErrorContains(t, err, "address already in use")
			require.ErrorContains(t, err, wantErr)
			require.NotContains(t, out.String(), "listening", "logged as listening though it exits on a taken address:\n%s", out.String())
			require.NotEmpty(t, line, "startup line missing in:\n%s", out.String())
			require.Contains(t, line, tt.want)
			require.NotContains(t, line, "active_health=0x")
		})
	}
}

func TestActiveHealth(t *testing.T) {
	on, off := true, false
	tests := []struct {
		name    string
		enabled *bool
		want    bool
	}{{"nil", nil, true}, {"true", &on, true}, {"false", &off, false}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cfg gateway.Config
			cfg.Health.Enabled = tt.enabled
			require.Equal(t, tt.want, activeHealth(cfg))
		})
	}
}

// -gomaxprocs: a negative or absurd value is refused before anything starts; a positive one sets
// runtime.GOMAXPROCS for the process.
func TestGOMAXPROCSFlag(t *testing.T) {
	err := run([]string{"-gomaxprocs", "-1", "-config", "does-not-exist.yaml"}, io.Discard)
	require.ErrorContains(t, err, "-gomaxprocs: -1")
	err = run([]string{"-gomaxprocs", "99999", "-config", "does-not-exist.yaml"}, io.Discard)
	require.ErrorContains(t, err, "-gomaxprocs: 99999", "an absurd value is refused before the runtime tries it")
	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	want := prev + 1
	err = run([]string{"-gomaxprocs", fmt.Sprint(want), "-config", "does-not-exist.yaml"}, io.Discard)
	require.Error(t, err, "no such config file")
	require.Equal(t, want, runtime.GOMAXPROCS(0))
}
