package gateway_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// A binding snapshot Serve cannot load because it is damaged (a flipped byte, a
// truncation, another snapshot version, NUL bytes where it was never written; a file
// that is not a snapshot at all is refused
// by New: TestBindingSnapshotRefusesAForeignFile) is kept as <path>.damaged, replacing an older one, before
// the gateway serves with an empty table; the snapshot saved at shutdown goes to <path>.
// A missing file is only a first start. (Before: the damaged file was overwritten at
// shutdown, evidence lost.)
func TestServeKeepsADamagedSnapshot(t *testing.T) {
	urls := jsonBackends(t, 1)
	good := func(t *testing.T) []byte { // a valid snapshot with one binding
		g, err := gateway.New(yamlConfig(t, urls, []string{"b0"}, []float64{1}, ""))
		require.NoError(t, err)
		t.Cleanup(g.Close)
		require.Equal(t, 200, send(t, g, "s1").Code)
		path := filepath.Join(t.TempDir(), "good.snap")
		_, err = g.SaveBindings(path)
		require.NoError(t, err)
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		return data
	}(t)
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)/2] ^= 0xff
	tests := []struct {
		name     string
		content  []byte // nil: no file
		older    bool   // an older .damaged file is there
		wantKept bool
	}{
		{"flipped byte", flipped, false, true},
		{"truncated, older .damaged replaced", good[:len(good)-3], true, true},
		{"another snapshot version", append([]byte("SAFSNAP2"), good[8:]...), false, true},
		{"zeros (blocks never written before a crash)", make([]byte, len(good)), false, true},
		{"zeros, shorter than the magic", make([]byte, 3), false, true},
		{"zeros after a good start", append(append([]byte(nil), good[:10]...), make([]byte, 20)...), false, true},
		{"missing", nil, false, false},
		{"empty: no snapshot", []byte{}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := filepath.Join(t.TempDir(), "bindings.snap")
			if tt.content != nil {
				require.NoError(t, os.WriteFile(snap, tt.content, 0o600))
			}
			if tt.older {
				require.NoError(t, os.WriteFile(snap+gateway.DamagedSnapshotSuffix, []byte("older"), 0o600))
			}
			g, logs, err := serveOnce(t, urls[0], snap)
			require.NoError(t, err)
			assert.Zero(t, g.Scheduler().Len(), "started with an empty table")

			kept, err := os.ReadFile(snap + gateway.DamagedSnapshotSuffix)
			if tt.wantKept {
				require.NoError(t, err)
				assert.Equal(t, tt.content, kept, "the damaged file is kept byte for byte")
				assert.True(t, logs.has("binding snapshot not loaded; starting with an empty table; the damaged file is kept"))
			} else {
				require.ErrorIs(t, err, os.ErrNotExist)
			}
			f, err := os.Open(snap)
			require.NoError(t, err, "the shutdown saved a snapshot")
			defer f.Close()
			s, err := affinity.New(affinity.Config{})
			require.NoError(t, err)
			n, err := s.Restore(f)
			require.NoError(t, err, "the saved snapshot is whole")
			assert.Zero(t, n)
		})
	}
}

// An empty binding_snapshot file (created ahead: touch, tmpfiles.d), which the config
// check accepts, is no snapshot at start: one Info line, no ERROR, no .damaged copy; the
// shutdown save replaces it. (Before: an ERROR "shorter than the 8-byte magic" and a
// stray .damaged file: tester32 #5.)
func TestServeTakesAnEmptySnapshotAsNone(t *testing.T) {
	urls := jsonBackends(t, 1)
	snap := filepath.Join(t.TempDir(), "bindings.snap")
	require.NoError(t, os.WriteFile(snap, nil, 0o600))
	g, logs, err := serveOnce(t, urls[0], snap)
	require.NoError(t, err)
	assert.Zero(t, g.Scheduler().Len())
	assert.True(t, logs.has("binding snapshot file is empty: no bindings to load; starting with an empty table"))
	assert.Empty(t, logs.warnings(), "no Warn or Error")
	_, err = os.Stat(snap + gateway.DamagedSnapshotSuffix)
	assert.ErrorIs(t, err, os.ErrNotExist)
	fi, err := os.Stat(snap)
	require.NoError(t, err)
	assert.Positive(t, fi.Size(), "the shutdown saved a snapshot over it")
}

// serveOnce builds a gateway over one backend b0 at url with binding_snapshot snap and a
// recording logger, and runs Serve with a context already cancelled: it loads the
// snapshot, serves nothing and saves. It returns the gateway, its log records and
// Serve's error.
func serveOnce(t *testing.T, url, snap string) (*gateway.Gateway, *records, error) {
	t.Helper()
	logs := &records{}
	g, err := gateway.New(yamlConfig(t, []string{url}, []string{"b0"}, []float64{1}, "binding_snapshot: "+snap+"\n"),
		gateway.WithLogger(slog.New(logs)))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return g, logs, g.Serve(ctx, ln)
}
