package gateway

import (
	"hash/maphash"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
)

// copyLateBindings copies only what copyBindings did not see, and never re-stores a seen
// binding the new table's cap evicted, nor overrides a binding the new table has.
func TestCopyLateBindings(t *testing.T) {
	newSched := func() *affinity.Scheduler {
		s, err := affinity.New(affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(600)})
		require.NoError(t, err)
		return s
	}
	from, to := newSched(), newSched()
	for _, s := range []string{"seen-evicted", "late", "late-live"} {
		require.NoError(t, from.Table().Bind(s, "", "b0"))
	}
	require.NoError(t, to.Table().Bind("late-live", "", "b1")) // bound on the new table since
	seen := bindingSet{seed: maphash.MakeSeed(), m: map[uint64]struct{}{}}
	seen.add(affinity.Binding{SessionID: "seen-evicted"})

	require.Equal(t, 1, copyLateBindings(from, to, seen))
	_, ok := to.Lookup("seen-evicted", "")
	require.False(t, ok, "a seen binding is not copied again")
	id, _ := to.Lookup("late", "")
	require.Equal(t, "b0", id)
	id, _ = to.Lookup("late-live", "")
	require.Equal(t, "b1", id, "the new table's binding wins")
	require.Equal(t, 2, to.Len())
}
