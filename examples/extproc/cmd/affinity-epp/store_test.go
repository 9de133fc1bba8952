package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity/redisstore/redistest"
)

// watchBuffer is a bytes.Buffer safe for concurrent use that closes seen once the text
// written so far contains want.
type watchBuffer struct {
	want string
	seen chan struct{}

	mu     sync.Mutex
	b      bytes.Buffer
	closed bool
}

func newWatchBuffer(want string) *watchBuffer {
	return &watchBuffer{want: want, seen: make(chan struct{})}
}

func (w *watchBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.b.Write(p)
	if !w.closed && strings.Contains(w.b.String(), w.want) {
		w.closed = true
		close(w.seen)
	}
	return n, err
}

func (w *watchBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

type discardRedisLog struct{}

func (discardRedisLog) Printf(context.Context, string, ...any) {}

// With a store: block and Redis unreachable, the picker starts degraded (one WARN), and
// go-redis's own messages (failed dials) arrive in the command's slog output at DEBUG,
// not raw on the process's stderr.
func TestRunRoutesRedisLogs(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	defer redis.SetLogger(discardRedisLog{}) // no later test logs into this buffer
	cfg := filepath.Join(t.TempDir(), "gateway.yaml")
	yaml := fmt.Sprintf("backends:\n  - {id: b0, url: \"http://127.0.0.1:9\"}\nstore: {address: %q, dial_timeout_seconds: 0.3}\n", srv.Addr())
	require.NoError(t, os.WriteFile(cfg, []byte(yaml), 0o600))

	out := newWatchBuffer("logger=go-redis")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-config", cfg, "-grpc", "127.0.0.1:0", "-metrics", "127.0.0.1:0", "-v"}, out, nil)
	}()
	select {
	case <-out.seen:
	case err := <-done:
		t.Fatalf("run returned before a go-redis message was logged: %v\n%s", err, out.String())
	case <-time.After(10 * time.Second): // a bound on a hang, not a wait for an event
		t.Fatalf("no go-redis message in the slog output:\n%s", out.String())
	}
	cancel()
	require.NoError(t, <-done)
	log := out.String()
	assert.Regexp(t, `level=DEBUG msg="[^"]+" logger=go-redis`, log)
	assert.Equal(t, 1, strings.Count(log, "level=WARN"), log)
}
