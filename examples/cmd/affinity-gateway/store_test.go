package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity/redisstore/redistest"
)

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// storeConfig writes a config with one backend, listen on a free port and a store:
// block for addr (plus extra keys), and returns its path.
func storeConfig(t *testing.T, addr, extra string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(srv.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	listen := ln.Addr().String()
	require.NoError(t, ln.Close())
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	cfg := fmt.Sprintf("listen: %s\nbackends:\n  - {id: b0, url: %q}\nstore: {address: %q, dial_timeout_seconds: 0.3%s}\n", listen, srv.URL, addr, extra)
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	return path
}

// A store setting Redis refuses stops the command with an error naming store.
func TestRunRefusesRejectedStore(t *testing.T) {
	srv := redistest.Start(t)
	err := run([]string{"-config", storeConfig(t, srv.Addr(), ", db: 99")}, &lockedBuffer{})
	require.Error(t, err)
	require.Contains(t, err.Error(), "store: ")
	require.Contains(t, err.Error(), "db")
}

// With Redis unreachable the command starts degraded (one WARN), and go-redis's own
// messages arrive in the command's slog output (at DEBUG), not on the process's stderr.
func TestRunRoutesRedisLogs(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	defer redis.SetLogger(discardRedisLog{}) // no later test logs into this buffer
	var out lockedBuffer
	done := make(chan error, 1)
	go func() { done <- run([]string{"-config", storeConfig(t, srv.Addr(), ""), "-log-level", "debug"}, &out) }()
	until(t, "a go-redis message in slog", func() bool { return strings.Contains(out.String(), "logger=go-redis") })
	until(t, "the gateway to listen", func() bool { return strings.Contains(out.String(), "gateway listening") })
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	require.NoError(t, <-done)
	log := out.String()
	require.Equal(t, 1, strings.Count(log, "level=WARN"), log)
	require.Contains(t, log, "gateway: Redis unreachable at start")
}

type discardRedisLog struct{}

func (discardRedisLog) Printf(context.Context, string, ...any) {}
