package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// max_session_id_bytes is held to what a binding snapshot holds (less the tenant tag), so
// a long session ID can never make a snapshot the next start rejects whole.
func TestMaxSessionIDBytesHeldToTheSnapshotCap(t *testing.T) {
	tests := []struct {
		name string
		n    int
		ok   bool
	}{
		{"default", 0, true},
		{"the cap", gateway.SessionIDBytesCap, true},
		{"one over", gateway.SessionIDBytesCap + 1, false},
		{"64 KiB (the tag would not fit)", affinity.MaxSnapshotSessionIDBytes, false},
		{"100000 (tester16's repro)", 100_000, false},
		{"near MaxInt", math.MaxInt - 10, false},
	}
	for _, tt := range tests {
		for _, tenant := range []string{"", "tenant: {api_key: true}\n"} {
			t.Run(fmt.Sprintf("%s tenant=%t", tt.name, tenant != ""), func(t *testing.T) {
				_, err := gateway.ParseConfig([]byte(fmt.Sprintf("%saffinity: {max_session_id_bytes: %d}\n", minimal+tenant, tt.n)))
				if tt.ok {
					require.NoError(t, err)
					return
				}
				require.ErrorIs(t, err, gateway.ErrInvalidConfig)
				require.ErrorIs(t, err, gateway.ErrAffinityConfig)
				require.ErrorContains(t, err, fmt.Sprintf("affinity.max_session_id_bytes: %d: above %d", tt.n, gateway.SessionIDBytesCap))
			})
		}
	}
	require.Equal(t, affinity.MaxSnapshotSessionIDBytes-gateway.TenantTagBytes, gateway.SessionIDBytesCap)
}

// At the cap, with tenant scoping on (the longest key the Scheduler stores), a session
// survives a save and a load.
func TestLongestSessionSurvivesASnapshot(t *testing.T) {
	urls := jsonBackends(t, 2)
	extra := fmt.Sprintf("affinity: {max_session_id_bytes: %d}\ntenant: {header: X-Tenant-ID}\n", gateway.SessionIDBytesCap)
	cfg := yamlConfig(t, urls, []string{"b0", "b1"}, []float64{1, 1}, extra)
	g, err := gateway.New(cfg)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	long := strings.Repeat("s", gateway.SessionIDBytesCap)
	for _, s := range []string{"alice", long} {
		rec := do(t, g, chat, chatBody, map[string]string{"X-Tenant-ID": "acme", "X-Session-ID": s})
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	}
	path := filepath.Join(t.TempDir(), "b.snap")
	n, err := g.SaveBindings(path)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	g2, err := gateway.New(cfg)
	require.NoError(t, err)
	t.Cleanup(g2.Close)
	n, err = g2.LoadBindings(path)
	require.NoError(t, err)
	require.Equal(t, 2, n)
}

// binding_snapshot naming an existing file that is not a snapshot is refused at start
// and on reload (the old config keeps serving), and the file is left as it was. (Before:
// it was renamed to .damaged at start, or replaced by a snapshot at shutdown after a
// reload, with no copy kept.)
func TestBindingSnapshotRefusesAForeignFile(t *testing.T) {
	urls := jsonBackends(t, 1)
	good := func(t *testing.T) []byte {
		g, err := gateway.New(yamlConfig(t, urls, []string{"b0"}, []float64{1}, ""))
		require.NoError(t, err)
		t.Cleanup(g.Close)
		var buf bytes.Buffer
		_, err = g.Scheduler().Snapshot(&buf)
		require.NoError(t, err)
		return buf.Bytes()
	}(t)
	tests := []struct {
		name    string
		content []byte
		ok      bool
	}{
		{"text", []byte("important notes\n"), false},
		{"yaml", []byte("listen: 127.0.0.1:0\nbackends: []\n"), false},
		{"one byte", []byte("x"), false},
		{"almost the magic", []byte("SAFSNAQ1 and more"), false},
		{"empty", []byte{}, true},
		{"a snapshot", good, true},
		{"another snapshot version", append([]byte("SAFSNAP2"), good[8:]...), true},
		{"a truncated snapshot", good[:3], true},
		// NUL bytes where a snapshot was never written (a crash): a damaged snapshot,
		// which the load keeps aside; a byte other than NUL in the head is another file.
		{"NUL bytes", make([]byte, 4096), true},
		{"NUL bytes, shorter than the magic", []byte{0, 0}, true},
		{"NUL then text", []byte("\x00\x00\x00x notes"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "file")
			require.NoError(t, os.WriteFile(path, tt.content, 0o644))
			extra := "binding_snapshot: " + path + "\n"

			_, err := gateway.New(yamlConfig(t, urls, []string{"b0"}, []float64{1}, extra))
			g, gerr := gateway.New(yamlConfig(t, urls, []string{"b0"}, []float64{1}, ""))
			require.NoError(t, gerr)
			t.Cleanup(g.Close)
			rerr := g.Reload(yamlConfig(t, urls, []string{"b0"}, []float64{1}, extra))
			if tt.ok {
				require.NoError(t, err)
				require.NoError(t, rerr)
				return
			}
			for _, err := range []error{err, rerr} {
				require.ErrorIs(t, err, gateway.ErrBindingSnapshot)
				require.ErrorContains(t, err, "binding_snapshot: "+fmt.Sprintf("%q", path)+": exists and is not a binding snapshot")
			}
			assert.Empty(t, g.Config().BindingSnapshot, "the reload was rejected: the old config serves")
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, tt.content, got, "the file is untouched")
		})
	}
	t.Run("the config file itself", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "gw.yaml")
		yaml := fmt.Sprintf("listen: 127.0.0.1:0\nbackends:\n  - {id: b0, url: %q}\nbinding_snapshot: %s\n", urls[0], path)
		require.NoError(t, os.WriteFile(path, []byte(yaml), 0o644))
		cfg, err := gateway.LoadConfig(path)
		require.NoError(t, err)
		_, err = gateway.New(cfg)
		require.ErrorIs(t, err, gateway.ErrBindingSnapshot)
	})
}

// acceptSignal is a listener that closes accepted when Serve first accepts, that is once
// the snapshot is loaded; with fail, Accept fails (a listener that breaks at start).
type acceptSignal struct {
	net.Listener
	once     sync.Once
	accepted chan struct{}
	fail     bool
}

func (l *acceptSignal) Accept() (net.Conn, error) {
	l.once.Do(func() { close(l.accepted) })
	if l.fail {
		return nil, errors.New("listener broke")
	}
	return l.Listener.Accept()
}

// A loaded snapshot is consumed: while the gateway serves there is no file (a crash then
// starts empty instead of restoring bindings that moved since); the shutdown writes a
// fresh one. The load is logged when it starts and ends. If Serve fails after the load
// (its listener breaks), the bindings are saved on the way out.
func TestServeConsumesTheSnapshot(t *testing.T) {
	urls := jsonBackends(t, 2)
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("listener fails=%t", fail), func(t *testing.T) {
			snap := filepath.Join(t.TempDir(), "b.snap")
			cfg := yamlConfig(t, urls, []string{"b0", "b1"}, []float64{1, 1}, "binding_snapshot: "+snap+"\n")
			g0, err := gateway.New(cfg)
			require.NoError(t, err)
			t.Cleanup(g0.Close)
			for _, s := range []string{"a", "b", "c"} {
				require.Equal(t, http.StatusOK, send(t, g0, s).Code)
			}
			_, err = g0.SaveBindings(snap)
			require.NoError(t, err)
			fi, err := os.Stat(snap)
			require.NoError(t, err)

			logs := &records{}
			g, err := gateway.New(cfg, gateway.WithLogger(slog.New(logs)))
			require.NoError(t, err)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			sl := &acceptSignal{Listener: ln, accepted: make(chan struct{}), fail: fail}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- g.Serve(ctx, sl) }()
			<-sl.accepted
			if !fail {
				_, err = os.Stat(snap)
				require.ErrorIs(t, err, os.ErrNotExist, "consumed while serving: a crash now starts empty")
				assert.Equal(t, 3, g.Scheduler().Len())
				cancel()
			}
			err = <-done
			if fail {
				require.ErrorContains(t, err, "listener broke")
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, map[string]any{"path": snap, "bytes": fi.Size()}, logs.attrs("loading binding snapshot"))
			loaded := logs.attrs("binding snapshot loaded")
			assert.Equal(t, int64(3), loaded["bindings"])
			assert.Equal(t, int64(3), loaded["records"])
			assert.Equal(t, int64(0), loaded["dropped_expired"])
			assert.Equal(t, true, loaded["file_removed"])
			assert.Contains(t, loaded, "duration")

			g2, err := gateway.New(cfg)
			require.NoError(t, err)
			t.Cleanup(g2.Close)
			n, err := g2.LoadBindings(snap)
			require.NoError(t, err)
			assert.Equal(t, 3, n, "the shutdown saved the loaded bindings again")
		})
	}
}

// A snapshot that exists but cannot be read is kept aside like a damaged one; when it
// cannot be kept aside either, the shutdown does not save over it (Error, and Serve
// fails). A symlink loop is unreadable for root too (tests may run as root, which
// permission bits do not stop); a directory at <path>.damaged makes the rename fail.
// (Before: the file was replaced at shutdown.)
func TestServeKeepsAnUnreadableSnapshot(t *testing.T) {
	urls := jsonBackends(t, 1)
	for _, renameFails := range []bool{false, true} {
		t.Run(fmt.Sprintf("rename fails=%t", renameFails), func(t *testing.T) {
			dir := t.TempDir()
			snap := filepath.Join(dir, "b.snap")
			require.NoError(t, os.Symlink("b.snap", snap)) // a loop: open fails with ELOOP
			if renameFails {
				require.NoError(t, os.MkdirAll(filepath.Join(snap+gateway.DamagedSnapshotSuffix, "x"), 0o755))
			}
			g, logs, err := serveOnce(t, urls[0], snap)
			if !renameFails {
				require.NoError(t, err)
				target, err := os.Readlink(snap + gateway.DamagedSnapshotSuffix)
				require.NoError(t, err, "the unreadable file is kept aside")
				assert.Equal(t, "b.snap", target)
				assert.True(t, logs.has("binding snapshot not loaded; starting with an empty table; the unreadable file is kept"))
				f, err := os.Open(snap)
				require.NoError(t, err, "the shutdown saved a snapshot")
				defer f.Close()
				_, err = g.Scheduler().Restore(f)
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, "binding snapshot not saved")
			assert.True(t, logs.has("binding snapshot not saved: the file there could not be read at start nor kept aside, and saving would replace it"))
			target, err := os.Readlink(snap)
			require.NoError(t, err, "the file is left as it was")
			assert.Equal(t, "b.snap", target)
		})
	}
}

// A file larger than max_bindings records of the longest kind is refused as damaged
// without being read (kept aside by Serve); a full table of the longest records fits.
func TestLoadBindingsRefusesAnOversizedFile(t *testing.T) {
	urls := jsonBackends(t, 2)
	long := func(c string, n int) string { return strings.Repeat(c, n) }
	ids := []string{long("a", gateway.MaxBackendIDBytes), long("b", gateway.MaxBackendIDBytes)}
	tier := long("t", affinity.MaxTierBytes)
	extra := fmt.Sprintf("affinity: {max_bindings: 4, max_session_id_bytes: 300}\ntenant: {header: X-Tenant-ID}\nmodel_tiers: {m: %s}\n", tier)
	small := yamlConfig(t, urls, ids, []float64{1, 1}, extra)
	g, err := gateway.New(small)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	for i := range 4 {
		rec := do(t, g, chat, `{"model":"m"}`, map[string]string{"X-Tenant-ID": "acme", "X-Session-ID": fmt.Sprint(i) + long("s", 299)})
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	}
	require.Equal(t, 4, g.Scheduler().Len())
	dir := t.TempDir()
	full := filepath.Join(dir, "full.snap")
	_, err = g.SaveBindings(full)
	require.NoError(t, err)
	fi, err := os.Stat(full)
	require.NoError(t, err)
	require.LessOrEqual(t, fi.Size(), gateway.MaxSnapshotBytes(small), "a full table of the longest records fits the bound")
	g2, err := gateway.New(small)
	require.NoError(t, err)
	t.Cleanup(g2.Close)
	n, err := g2.LoadBindings(full)
	require.NoError(t, err)
	require.Equal(t, 4, n)

	// The same file under max_bindings 1: larger than one record of the longest kind.
	tiny := yamlConfig(t, urls, ids, []float64{1, 1}, strings.Replace(extra, "max_bindings: 4", "max_bindings: 1", 1))
	g3, err := gateway.New(tiny)
	require.NoError(t, err)
	t.Cleanup(g3.Close)
	_, err = g3.LoadBindings(full)
	require.ErrorIs(t, err, affinity.ErrCorruptSnapshot)
	require.ErrorContains(t, err, fmt.Sprintf("%d bytes, more than 1 records of the longest kind take (%d bytes", fi.Size(), gateway.MaxSnapshotBytes(tiny)))
	assert.Zero(t, g3.Scheduler().Len())
}

// attrs returns the attributes of the first record with message msg (nil if none), with
// durations as time.Duration, integers as int64 and booleans as bool.
func (h *records) attrs(msg string) map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if r.Message != msg {
			continue
		}
		out := map[string]any{}
		r.Attrs(func(a slog.Attr) bool {
			out[a.Key] = a.Value.Any()
			return true
		})
		return out
	}
	return nil
}

// Bindings a restart cannot keep, here over a lowered max_bindings, are counted in the
// load's line (dropped_over_cap), which is then a Warn: they were live when saved.
// (Before: an Info line whose counts left them out.)
func TestServeWarnsOfBindingsDroppedAtLoad(t *testing.T) {
	urls := jsonBackends(t, 2)
	snap := filepath.Join(t.TempDir(), "b.snap")
	cfg := yamlConfig(t, urls, []string{"b0", "b1"}, []float64{1, 1}, "binding_snapshot: "+snap+"\n")
	g0, err := gateway.New(cfg)
	require.NoError(t, err)
	t.Cleanup(g0.Close)
	const sessions = 40
	for i := range sessions {
		require.Equal(t, http.StatusOK, send(t, g0, fmt.Sprintf("s%d", i)).Code)
	}
	_, err = g0.SaveBindings(snap)
	require.NoError(t, err)

	small := yamlConfig(t, urls, []string{"b0", "b1"}, []float64{1, 1},
		"binding_snapshot: "+snap+"\naffinity: {max_bindings: 16}\n")
	logs := &records{}
	g, err := gateway.New(small, gateway.WithLogger(slog.New(logs)))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	sl := &acceptSignal{Listener: ln, accepted: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, sl) }()
	<-sl.accepted
	cancel()
	require.NoError(t, <-done)

	loaded := logs.attrs("binding snapshot loaded")
	stored, ok := loaded["bindings"].(int64)
	require.True(t, ok, "%v", loaded)
	assert.LessOrEqual(t, stored, int64(16))
	assert.Equal(t, int64(sessions), loaded["records"])
	assert.Equal(t, int64(sessions)-stored, loaded["dropped_over_cap"])
	assert.Contains(t, logs.warnings(), "binding snapshot loaded")
}
