package gateway_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// Every reload's outcome line says what triggered it: trigger=api for Reload and
// ReloadFile, the caller's word for ReloadFileFor (the command passes sighup), watch for
// WatchConfig. (Before: no trigger; a -watch-config reload could not be told from a
// SIGHUP: tester32 #6c.)
func TestReloadLogsItsTrigger(t *testing.T) {
	url := jsonBackends(t, 1)[0]
	dir := t.TempDir()
	path := filepath.Join(dir, "gateway.yaml")
	write := func(id string) {
		t.Helper()
		tmp := filepath.Join(dir, "new.yaml")
		require.NoError(t, os.WriteFile(tmp, fmt.Appendf(nil, "listen: 127.0.0.1:0\nbackends:\n  - {id: %s, url: %q}\n", id, url), 0o600))
		require.NoError(t, os.Rename(tmp, path)) // another file: the watcher sees it whatever the clock
	}
	write("b0")
	logs := &records{}
	cfg, err := gateway.LoadConfig(path)
	require.NoError(t, err)
	g, err := gateway.New(cfg, gateway.WithLogger(slog.New(logs)))
	require.NoError(t, err)
	t.Cleanup(g.Close)

	last := func(msg string) any {
		logs.mu.Lock()
		defer logs.mu.Unlock()
		var trigger any
		for _, r := range logs.recs {
			if r.Message == msg {
				r.Attrs(func(a slog.Attr) bool {
					if a.Key == "trigger" {
						trigger = a.Value.Any()
					}
					return true
				})
			}
		}
		return trigger
	}
	write("b1")
	require.NoError(t, g.ReloadFileFor(path, gateway.TriggerSIGHUP, nil))
	assert.Equal(t, "sighup", last("config reloaded"))

	write("b2")
	require.NoError(t, g.ReloadFile(path, nil))
	assert.Equal(t, "api", last("config reloaded"))

	cfg = g.Config()
	cfg.Backends = []gateway.BackendConfig{{ID: "b3", URL: url}}
	require.NoError(t, g.Reload(cfg))
	assert.Equal(t, "api", last("config reloaded"))

	logs = &records{}
	g, ticks := watchGateway(t, path, gateway.WithLogger(slog.New(logs)))
	ticks <- time.Time{} // the first look is done
	write("b4")
	ticks <- time.Time{}
	ticks <- time.Time{} // the previous tick's reload is done
	assert.Equal(t, "b4", g.Config().Backends[0].ID)
	assert.Equal(t, "watch", last("config reloaded"))

	require.NoError(t, os.WriteFile(path, []byte("backends: []\n"), 0o600))
	ticks <- time.Time{}
	ticks <- time.Time{}
	assert.Equal(t, "watch", last("config reload rejected; the previous config keeps serving"))
}

// A SIGHUP after an edit, with -watch-config on, loads the file once: the watcher does not
// load again the file the SIGHUP's reload read. (Before: a second "config reloaded" with
// every change list empty at the watcher's next tick: tester32 #6c.)
func TestWatchConfigSkipsTheFileASIGHUPLoaded(t *testing.T) {
	w := newWatchedFile(t)
	g, dir, path, logs, content, tick := w.g, w.dir, w.path, w.logs, w.content, w.tick
	count := func(msg string) int { return strings.Count(logs.String(), `"msg":"`+msg) }
	tick(1)

	tmp := filepath.Join(dir, "new.yaml")
	require.NoError(t, os.WriteFile(tmp, content("b1"), 0o600))
	require.NoError(t, os.Rename(tmp, path))
	require.NoError(t, g.ReloadFileFor(path, gateway.TriggerSIGHUP, nil)) // the SIGHUP
	tick(3)
	assert.Equal(t, "b1", g.Config().Backends[0].ID)
	// The watcher's look pending from the last tick may see the edit before the SIGHUP
	// reads it: then the watcher loads it and the SIGHUP finds it unchanged. Either way it
	// is loaded once, and the watcher never loads again what a SIGHUP read.
	assert.Equal(t, 1, count("config reloaded"), logs.String())
	assert.NotContains(t, logs.String(), `"msg":"config unchanged; nothing to apply","trigger":"watch"`)

	// An edit after that is still the watcher's.
	require.NoError(t, os.WriteFile(tmp, content("b2"), 0o600))
	require.NoError(t, os.Rename(tmp, path))
	tick(1)
	assert.Equal(t, "b2", g.Config().Backends[0].ID)
	assert.Equal(t, 2, count("config reloaded"))
	assert.Contains(t, logs.String(), `"trigger":"watch"`)
}

// A reload whose config equals the current one applies nothing and logs one Info
// "config unchanged" (with its trigger), not a "config reloaded" with every list empty:
// a SIGHUP of an untouched file, or a touch seen by the watcher. (Decision, tester32 #6c.)
func TestReloadUnchangedConfig(t *testing.T) {
	url := jsonBackends(t, 1)[0]
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	require.NoError(t, os.WriteFile(path, fmt.Appendf(nil, "listen: 127.0.0.1:0\nbackends:\n  - {id: b0, url: %q}\n", url), 0o600))
	logs := &records{}
	g, ticks := watchGateway(t, path, gateway.WithLogger(slog.New(logs)))
	ticks <- time.Time{}
	sched := g.Scheduler()

	require.NoError(t, g.ReloadFileFor(path, gateway.TriggerSIGHUP, nil))
	require.NoError(t, g.Reload(g.Config()))
	later := time.Now().Add(time.Hour)
	require.NoError(t, os.Chtimes(path, later, later)) // a touch
	ticks <- time.Time{}
	ticks <- time.Time{}

	assert.Zero(t, logs.count("config reloaded"))
	assert.Equal(t, 3, logs.count("config unchanged; nothing to apply"))
	assert.Same(t, sched, g.Scheduler())
	var triggers []string
	logs.mu.Lock()
	for _, r := range logs.recs {
		if r.Message == "config unchanged; nothing to apply" {
			assert.Equal(t, slog.LevelInfo, r.Level)
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "trigger" {
					triggers = append(triggers, a.Value.String())
				}
				return true
			})
		}
	}
	logs.mu.Unlock()
	assert.Equal(t, []string{"sighup", "api", "watch"}, triggers)
}
