package gateway_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// WatchConfig says when the watched path goes missing or becomes a dangling symlink (one
// Warn per transition, not one per tick) and when it is back (Info), and loads a
// replacement renamed over it with the same size and modification time. (Before: silent
// skips, and such a replacement was never loaded until a SIGHUP.)
func TestWatchConfigMissingAndSameStampReplacement(t *testing.T) {
	w := newWatchedFile(t)
	g, dir, path, logs, content, tick := w.g, w.dir, w.path, w.logs, w.content, w.tick
	count := func(msg string) int { return strings.Count(logs.String(), `"msg":"`+msg) }
	backend := func() string { return g.Config().Backends[0].ID }

	// replace renames a file with content id over path, keeping path's size and mtime.
	replace := func(id string) {
		t.Helper()
		old, err := os.Stat(path)
		require.NoError(t, err)
		tmp := filepath.Join(dir, "new.yaml")
		require.NoError(t, os.WriteFile(tmp, content(id), 0o600))
		require.NoError(t, os.Chtimes(tmp, old.ModTime(), old.ModTime()))
		require.NoError(t, os.Rename(tmp, path))
		now, err := os.Stat(path)
		require.NoError(t, err)
		require.Equal(t, old.Size(), now.Size())
		require.True(t, old.ModTime().Equal(now.ModTime()), "the test keeps the stamp")
	}

	tick(2)
	assert.Equal(t, "b0", backend())
	replace("b1")
	tick(1)
	assert.Equal(t, "b1", backend(), "a same-size, same-mtime replacement is loaded")
	tick(2)
	assert.Equal(t, 1, count("config reloaded"), "loaded once")

	steps := []struct {
		name             string
		act              func()
		missing, dangles int // Warns so far
		back             int // Infos so far
	}{
		{"removed", func() { require.NoError(t, os.Remove(path)) }, 1, 0, 0},
		{"still missing", func() {}, 1, 0, 0},
		{"a dangling symlink", func() { require.NoError(t, os.Symlink(filepath.Join(dir, "nowhere.yaml"), path)) }, 1, 1, 0},
		{"its target appears", func() { require.NoError(t, os.WriteFile(filepath.Join(dir, "nowhere.yaml"), content("b2"), 0o600)) }, 1, 1, 1},
		{"the target goes again", func() { require.NoError(t, os.Remove(filepath.Join(dir, "nowhere.yaml"))) }, 1, 2, 1},
		{"replaced by a file", func() { // renamed over the symlink: one step, as a watcher may look at any time
			require.NoError(t, os.WriteFile(filepath.Join(dir, "b3.yaml"), content("b3"), 0o600))
			require.NoError(t, os.Rename(filepath.Join(dir, "b3.yaml"), path))
		}, 1, 2, 2},
	}
	for _, st := range steps {
		st.act()
		tick(3)
		assert.Equal(t, st.missing, count("watched config file is missing"), "%s: missing Warns\n%s", st.name, logs.String())
		assert.Equal(t, st.dangles, count("watched config file is a dangling symlink"), "%s: dangling Warns", st.name)
		assert.Equal(t, st.back, count("watched config file is back"), "%s: back Infos", st.name)
	}
	assert.Equal(t, "b3", backend(), "the file that came back is loaded")
	assert.Contains(t, logs.String(), `"level":"WARN","msg":"watched config file is missing`)
	assert.Contains(t, logs.String(), `"level":"INFO","msg":"watched config file is back`)
}

// watchGateway builds a gateway from the config file at path (opts added) and runs its
// WatchConfig on the returned tick channel until the test ends, which checks that the
// watch then returned nil.
// watchedFile is a gateway whose configuration file path (in dir; one backend, b0, at
// first) WatchConfig polls on ticks (watchGateway); logs holds its log lines.
type watchedFile struct {
	g              *gateway.Gateway
	ticks          chan<- time.Time
	dir, path, url string
	logs           *syncBuffer
}

func newWatchedFile(t *testing.T) *watchedFile {
	t.Helper()
	w := &watchedFile{url: jsonBackends(t, 1)[0], dir: t.TempDir()}
	w.path = filepath.Join(w.dir, "gateway.yaml")
	require.NoError(t, os.WriteFile(w.path, w.content("b0"), 0o600))
	logger, logs := captureLogs()
	w.logs = logs
	w.g, w.ticks = watchGateway(t, w.path, gateway.WithLogger(logger))
	return w
}

// content is a configuration file with one backend, of ID id.
func (w *watchedFile) content(id string) []byte {
	return fmt.Appendf(nil, "listen: 127.0.0.1:0\nbackends:\n  - {id: %s, url: %q}\n", id, w.url)
}

// tick sends n+1 ticks: the first n looks have finished when it returns (the last may
// still run, so each change between two calls is one atomic step).
func (w *watchedFile) tick(n int) {
	for range n + 1 {
		w.ticks <- time.Time{}
	}
}

func watchGateway(t *testing.T, path string, opts ...gateway.Option) (*gateway.Gateway, chan<- time.Time) {
	t.Helper()
	cfg, err := gateway.LoadConfig(path)
	require.NoError(t, err)
	g, err := gateway.New(cfg, opts...)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	ctx, cancel := context.WithCancel(context.Background())
	ticks := make(chan time.Time)
	done := make(chan error, 1)
	go func() { done <- g.WatchConfig(ctx, path, ticks, nil) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return g, ticks
}
