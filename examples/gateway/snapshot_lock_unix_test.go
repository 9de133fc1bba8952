//go:build unix

package gateway_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// holdLock takes binding_snapshot's lock as another gateway would; the returned func
// lets it go.
func holdLock(t *testing.T, snap string) func() {
	t.Helper()
	f, err := os.OpenFile(snap+gateway.SnapshotLockSuffix, os.O_RDWR|os.O_CREATE, 0o600)
	require.NoError(t, err)
	require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB))
	t.Cleanup(func() { _ = f.Close() })
	return func() { require.NoError(t, f.Close()) }
}

// Serve holds binding_snapshot's lock from before the load until after the save. A
// gateway started while another holds it (the one it replaces, still draining) waits,
// loads nothing meanwhile, then loads what the other saved once it lets go; one that
// waits longer than its bound refuses to start with ErrSnapshotInUse and leaves the file
// alone; one shut down while it waits returns nil and saves nothing (tester46: two
// gateways on one path both loaded it and the last save replaced the other's bindings;
// an overlapping restart loaded nothing).
func TestServeWaitsForSnapshotLock(t *testing.T) {
	urls := jsonBackends(t, 3)
	ids := []string{"b0", "b1", "b2"}
	dir := t.TempDir()
	snap := filepath.Join(dir, "bindings.snap")
	cfg := yamlConfig(t, urls, ids, []float64{1, 1, 1}, "binding_snapshot: "+snap+"\n")
	const n = 30
	saveSessions := func(t *testing.T) []byte {
		g0, err := gateway.New(yamlConfig(t, urls, ids, []float64{1, 1, 1}, ""))
		require.NoError(t, err)
		defer g0.Close()
		for i := range n {
			send(t, g0, fmt.Sprintf("lk-%02d", i))
		}
		_, err = g0.SaveBindings(snap)
		require.NoError(t, err)
		b, err := os.ReadFile(snap)
		require.NoError(t, err)
		return b
	}
	serve := func(t *testing.T, ctx context.Context, g *gateway.Gateway) chan error {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- g.Serve(ctx, ln) }()
		return done
	}

	t.Run("waits, then loads", func(t *testing.T) {
		saveSessions(t)
		release := holdLock(t, snap)
		log, logs := captureLogs()
		g, err := gateway.New(cfg, gateway.WithLogger(log), gateway.WithSnapshotLockWait(time.Minute))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := serve(t, ctx, g)
		require.Eventually(t, func() bool { return strings.Contains(logs.String(), "is locked by another process") },
			5*time.Second, time.Millisecond)
		assert.Zero(t, g.Scheduler().Len(), "nothing loaded while the other holds the lock")
		assert.FileExists(t, snap)
		release()
		require.Eventually(t, func() bool { return g.Scheduler().Len() == n }, 5*time.Second, time.Millisecond, "loaded once the lock is free")
		require.Eventually(t, func() bool { return strings.Contains(logs.String(), "binding_snapshot lock acquired") }, 5*time.Second, time.Millisecond)
		cancel()
		require.NoError(t, <-done)
		assert.FileExists(t, snap, "saved at shutdown")
	})

	t.Run("refuses after its bound", func(t *testing.T) {
		before := saveSessions(t)
		holdLock(t, snap)
		g, err := gateway.New(cfg, gateway.WithSnapshotLockWait(200*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(g.Close)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		select {
		case err = <-serve(t, ctx, g):
		case <-time.After(10 * time.Second): // bounds a Serve that does not wait for the lock
			t.Fatal("Serve neither refused nor returned: it does not wait for the lock")
		}
		require.ErrorIs(t, err, gateway.ErrSnapshotInUse)
		assert.Contains(t, err.Error(), snap+gateway.SnapshotLockSuffix)
		after, rerr := os.ReadFile(snap)
		require.NoError(t, rerr)
		assert.Equal(t, before, after, "the snapshot is left as it was")
		assert.Zero(t, g.Scheduler().Len())
	})

	t.Run("shut down while waiting", func(t *testing.T) {
		before := saveSessions(t)
		holdLock(t, snap)
		log, logs := captureLogs()
		g, err := gateway.New(cfg, gateway.WithLogger(log), gateway.WithSnapshotLockWait(time.Minute))
		require.NoError(t, err)
		t.Cleanup(g.Close)
		ctx, cancel := context.WithCancel(context.Background())
		done := serve(t, ctx, g)
		require.Eventually(t, func() bool { return strings.Contains(logs.String(), "is locked by another process") },
			5*time.Second, time.Millisecond)
		cancel()
		require.NoError(t, <-done)
		after, rerr := os.ReadFile(snap)
		require.NoError(t, rerr)
		assert.Equal(t, before, after, "nothing loaded or saved")
	})
}

// A lock file that is not a regular file is a config error naming it, at New and at a
// reload that names that path (tester48: Serve exited after "gateway listening").
func TestSnapshotLockFileChecked(t *testing.T) {
	urls := jsonBackends(t, 1)
	dir := t.TempDir()
	snap := filepath.Join(dir, "bindings.snap")
	require.NoError(t, os.Mkdir(snap+gateway.SnapshotLockSuffix, 0o700))
	cfg := yamlConfig(t, urls, []string{"b0"}, []float64{1}, "binding_snapshot: "+snap+"\n")
	_, err := gateway.New(cfg)
	require.ErrorIs(t, err, gateway.ErrBindingSnapshot)
	assert.Contains(t, err.Error(), snap+gateway.SnapshotLockSuffix)
	assert.Contains(t, err.Error(), "is a directory")

	g, err := gateway.New(yamlConfig(t, urls, []string{"b0"}, []float64{1}, ""))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	require.ErrorIs(t, g.Reload(cfg), gateway.ErrBindingSnapshot)
}

// A reload that names another binding_snapshot path warns that the new file is saved
// without the lock Serve took at start on the first; one that keeps the path does not.
func TestReloadWarnsSnapshotPathUnlocked(t *testing.T) {
	urls := jsonBackends(t, 1)
	dir := t.TempDir()
	first := yamlConfig(t, urls, []string{"b0"}, []float64{1}, "binding_snapshot: "+filepath.Join(dir, "a.snap")+"\n")
	log, logs := captureLogs()
	g, err := gateway.New(first, gateway.WithLogger(log))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	require.NoError(t, g.Reload(yamlConfig(t, urls, []string{"b0"}, []float64{1}, "binding_snapshot: "+filepath.Join(dir, "a.snap")+"\ndrain_seconds: 3\n")))
	assert.NotContains(t, logs.String(), "binding_snapshot changed")
	require.NoError(t, g.Reload(yamlConfig(t, urls, []string{"b0"}, []float64{1}, "binding_snapshot: "+filepath.Join(dir, "b.snap")+"\n")))
	assert.Equal(t, 1, strings.Count(logs.String(), "binding_snapshot changed"))
}
