//go:build linux

package gateway_test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On Linux WatchConfig also compares the status-change time (ctime): a file rewritten
// in place on the same inode, keeping its size and modification time (what an unlink and
// re-create that gets the inode number back looks like too), is loaded. (Before: not
// seen until a SIGHUP.)
func TestWatchConfigSeesChangeTime(t *testing.T) {
	url := jsonBackends(t, 1)[0]
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	content := func(id string) []byte {
		return fmt.Appendf(nil, "listen: 127.0.0.1:0\nbackends:\n  - {id: %s, url: %q}\n", id, url)
	}
	require.NoError(t, os.WriteFile(path, content("b0"), 0o600))
	g, ticks := watchGateway(t, path)
	tick := func(n int) { // n+1 sends: the first n looks have finished
		for range n + 1 {
			ticks <- time.Time{}
		}
	}
	tick(1) // the first look records b0
	old, err := os.Stat(path)
	require.NoError(t, err)
	ctime := func(fi os.FileInfo) int64 { return fi.Sys().(*syscall.Stat_t).Ctim.Nano() }

	// Wait, on a file beside it, for one tick of the file system's coarse clock after now
	// (a bounded poll, no sleep): the rewrite then gets a later ctime, and the look the
	// last tick started has ended before the rewrite, which is not one atomic step.
	probe := filepath.Join(filepath.Dir(path), "probe")
	probeCtime := func() int64 {
		require.NoError(t, os.WriteFile(probe, nil, 0o600))
		fi, err := os.Stat(probe)
		require.NoError(t, err)
		return ctime(fi)
	}
	start := max(probeCtime(), ctime(old))
	for deadline := time.Now().Add(5 * time.Second); probeCtime() <= start; {
		require.True(t, time.Now().Before(deadline), "the file system clock never moved")
	}
	// Rewrite in place: the same inode and size, the modification time put back.
	require.NoError(t, os.WriteFile(path, content("b1"), 0o600)) // O_TRUNC: the same inode
	require.NoError(t, os.Chtimes(path, old.ModTime(), old.ModTime()))
	now, err := os.Stat(path)
	require.NoError(t, err)
	require.True(t, os.SameFile(old, now) && old.Size() == now.Size() && old.ModTime().Equal(now.ModTime()),
		"the test keeps inode, size and mtime")
	require.NotEqual(t, ctime(old), ctime(now))
	tick(1)
	assert.Equal(t, "b1", g.Config().Backends[0].ID, "the in-place rewrite is loaded")
}
