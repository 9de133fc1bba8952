package affinity_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
)

// TestTableManyBackendsChurn: a shard finds a backend's bindings list by the backend's
// table-wide number, and holds the number from the backend's first binding in the shard
// to its last (bindings wait in a batch before they are linked into the list). Many
// backends over few bindings per shard make numbers be taken, released, freed and reused
// all the time; every backend's bindings must stay findable as one list (DeleteBackend
// counts them) and bindings must read back.
func TestTableManyBackendsChurn(t *testing.T) {
	for _, nb := range []int{40, 500} {
		t.Run(fmt.Sprintf("backends=%d", nb), func(t *testing.T) {
			tb, _, _ := newTable(t, affinity.Config{MaxBindings: 1 << 20})
			model := map[string]string{}
			rng := rand.New(rand.NewPCG(21, uint64(nb)))
			for op := range 100_000 {
				s := fmt.Sprintf("s%d", rng.IntN(2000))
				switch r := rng.IntN(100); {
				case r < 50:
					b := fmt.Sprintf("backend-%d", rng.IntN(nb))
					require.NoError(t, tb.Bind(s, "", b))
					model[s] = b
				case r < 80:
					_, want := model[s]
					require.Equal(t, want, tb.Delete(s, ""), "op %d", op)
					delete(model, s)
				case r < 98:
					got, ok := tb.Get(s, "")
					want, wok := model[s]
					require.Equal(t, wok, ok, "op %d %s", op, s)
					require.Equal(t, want, got, "op %d %s", op, s)
				default:
					b := fmt.Sprintf("backend-%d", rng.IntN(nb))
					n := 0
					for k, mb := range model {
						if mb == b {
							delete(model, k)
							n++
						}
					}
					require.Equal(t, n, tb.DeleteBackend(b), "op %d: DeleteBackend(%s)", op, b)
				}
			}
			require.Equal(t, len(model), tb.Len())
			for b := range nb { // each backend's bindings form one list
				id := fmt.Sprintf("backend-%d", b)
				n := 0
				for k, mb := range model {
					if mb == id {
						delete(model, k)
						n++
					}
				}
				require.Equal(t, n, tb.DeleteBackend(id), id)
			}
			require.Zero(t, tb.Len())
		})
	}
}
