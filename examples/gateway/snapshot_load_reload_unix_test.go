//go:build unix

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

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// A reload that builds a new Scheduler while a binding snapshot loads waits for the load,
// then copies every restored binding (tester46: a SIGHUP during the start-up load copied
// the table before the load filled it, and the load filled the retired Scheduler: every
// restored binding lost). The snapshot comes through a FIFO, half of it before the reload
// starts and the rest after.
func TestReloadDuringSnapshotLoadKeepsBindings(t *testing.T) {
	urls := jsonBackends(t, 3)
	ids := []string{"b0", "b1", "b2"}
	base := yamlConfig(t, urls, ids, []float64{1, 1, 1}, "")
	g0, err := gateway.New(base)
	require.NoError(t, err)
	t.Cleanup(g0.Close)
	const n = 200
	for i := range n {
		send(t, g0, fmt.Sprintf("sess-%03d", i))
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "bindings.snap")
	saved, err := g0.SaveBindings(file)
	require.NoError(t, err)
	require.Equal(t, n, saved)
	snap, err := os.ReadFile(file)
	require.NoError(t, err)

	g, err := gateway.New(base)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	type result struct {
		n   int
		err error
	}
	loaded := make(chan result, 1)
	go func() {
		n, err := g.LoadBindings(fifo)
		loaded <- result{n, err}
	}()
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // opens once the load has
	require.NoError(t, err)
	_, err = w.Write(snap[:len(snap)/2])
	require.NoError(t, err)

	rebuild := yamlConfig(t, urls, ids, []float64{1, 1, 1}, "affinity: {sticky_ttl_seconds: 900}\n")
	reloaded := make(chan error, 1)
	go func() { reloaded <- g.Reload(rebuild) }()
	select { // a reload that does not wait for the load ends here, before the rest arrives
	case err := <-reloaded:
		reloaded <- err
	case <-time.After(100 * time.Millisecond):
	}
	_, err = w.Write(snap[len(snap)/2:])
	require.NoError(t, err)
	require.NoError(t, w.Close())
	res := <-loaded
	require.NoError(t, res.err)
	require.Equal(t, n, res.n)
	require.NoError(t, <-reloaded)

	assert.Equal(t, n, g.Scheduler().Len(), "the current Scheduler holds every restored binding")
	for i := range n {
		sess := fmt.Sprintf("sess-%03d", i)
		want, ok := g0.Scheduler().Lookup(sess, "")
		require.True(t, ok)
		got, ok := g.Scheduler().Lookup(sess, "")
		if assert.True(t, ok, sess) {
			assert.Equal(t, want, got, sess)
		}
	}
}
