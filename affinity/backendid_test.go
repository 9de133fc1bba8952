package affinity_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
	"github.com/agentserve/sessionaffinity/hrw"
)

// Table.Bind applies NewBackend's limit to the backend ID: empty or over
// MaxBackendIDBytes is ErrInvalidBackend, and the key's binding is left as it was.
func TestBindBackendIDLimit(t *testing.T) {
	tests := []struct {
		name    string
		id      string
		wantErr string // "" for no error
	}{
		{"one byte", "b", ""},
		{"exactly the limit", strings.Repeat("b", affinity.MaxBackendIDBytes), ""},
		{"one byte over", strings.Repeat("b", affinity.MaxBackendIDBytes+1), fmt.Sprintf("ID of %d bytes (max %d)", affinity.MaxBackendIDBytes+1, affinity.MaxBackendIDBytes)},
		{"1 MiB", strings.Repeat("b", 1<<20), fmt.Sprintf("ID of %d bytes (max %d)", 1<<20, affinity.MaxBackendIDBytes)},
		{"empty", "", "empty ID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb, err := affinity.NewTable(affinity.Config{}, affinity.WithClock(affinitytest.NewClock(t0)))
			require.NoError(t, err)
			require.NoError(t, tb.Bind("s", "", "old"))
			err = tb.Bind("s", "", tt.id)
			got, ok := tb.Get("s", "")
			require.True(t, ok)
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.Equal(t, tt.id, got)
				return
			}
			require.ErrorIs(t, err, affinity.ErrInvalidBackend)
			require.ErrorContains(t, err, tt.wantErr)
			require.Less(t, len(err.Error()), 200, "the ID is quoted truncated")
			require.Equal(t, "old", got, "the binding is untouched")
			require.Equal(t, 1, tb.Len())
		})
	}
}

// A shared store's value is never stored locally unless it names a candidate: a value
// over MaxBackendIDBytes (another writer, a damaged store) is replaced by the HRW winner
// through the store's compare-and-set, like any backend that is not a candidate.
func TestStoreValueOverLimitNotStored(t *testing.T) {
	st := newMemStore()
	long := strings.Repeat("b", affinity.MaxBackendIDBytes+1)
	st.m[affinity.StoreKey{Session: hrw.KeyHash("s"), Tier: hrw.KeyHash("")}] = long
	f := newFixture(t, affinity.Config{}, affinity.WithStore(st))
	cands := backends(t, 3)
	got, hit := f.sel(t, "s", "", cands)
	require.False(t, hit)
	require.Equal(t, hrwWinner("s", cands), got)
	id, ok := f.s.Lookup("s", "")
	require.True(t, ok)
	require.Equal(t, got, id)
	require.Equal(t, 1, st.rebinds)
	require.Equal(t, got, st.m[affinity.StoreKey{Session: hrw.KeyHash("s"), Tier: hrw.KeyHash("")}], "the store's value replaced")
	var buf bytes.Buffer
	ws, err := f.s.WriteSnapshot(&buf)
	require.NoError(t, err)
	require.Equal(t, affinity.SnapshotWriteStats{Bindings: 1}, ws)
}
