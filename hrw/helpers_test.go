package hrw_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/hrw"
)

func mustNode(tb testing.TB, id string, w float64) hrw.Node {
	tb.Helper()
	n, err := hrw.NewNode(id, w)
	require.NoError(tb, err)
	return n
}

// uniformNodes returns backend-0 .. backend-(n-1), weight 1.
func uniformNodes(tb testing.TB, n int) []hrw.Node {
	tb.Helper()
	out := make([]hrw.Node, n)
	for i := range out {
		out[i] = mustNode(tb, fmt.Sprintf("backend-%d", i), 1)
	}
	return out
}

// refRank is the naive reference: compute every score with the exported primitives,
// drop weight 0 and later duplicates, sort by (s desc, m desc, ID asc, index asc).
func refRank(kh uint64, nodes []hrw.Node, eligible func(int) bool) []int {
	type ent struct {
		s  float64
		m  uint64
		id string
		i  int
	}
	seen := map[string]bool{}
	var es []ent
	for i, n := range nodes {
		if eligible != nil && !eligible(i) {
			continue
		}
		if seen[n.ID()] {
			continue
		}
		seen[n.ID()] = true
		if n.Weight() == 0 {
			continue
		}
		es = append(es, ent{hrw.Score(kh, n), hrw.Mix(kh, n.Hash()) >> 11, n.ID(), i})
	}
	slices.SortFunc(es, func(a, b ent) int {
		if c := cmp.Compare(b.s, a.s); c != 0 {
			return c
		}
		if c := cmp.Compare(b.m, a.m); c != 0 {
			return c
		}
		if c := cmp.Compare(a.id, b.id); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	out := make([]int, len(es))
	for j, e := range es {
		out[j] = e.i
	}
	return out
}

func refPick(kh uint64, nodes []hrw.Node) int {
	r := refRank(kh, nodes, nil)
	if len(r) == 0 {
		return -1
	}
	return r[0]
}

// bestPick runs hrw.Best over nodes in order.
func bestPick(b *hrw.Best, kh uint64, nodes []hrw.Node) int {
	b.Reset(kh)
	for i := range nodes {
		b.Offer(i, &nodes[i])
	}
	return b.Index()
}

func idOf(nodes []hrw.Node, i int) string {
	if i < 0 {
		return "<none>"
	}
	return nodes[i].ID()
}

func idsOf(nodes []hrw.Node, idx []int) []string {
	out := make([]string, len(idx))
	for j, i := range idx {
		out[j] = nodes[i].ID()
	}
	return out
}

func nodeIDs(nodes []hrw.Node) []string {
	out := make([]string, len(nodes))
	for j, n := range nodes {
		out[j] = n.ID()
	}
	return out
}

// keySets are the three 10,000-key populations of the distribution tests.
func keySets() map[string][]string {
	s := make([]string, 10000)
	conv := make([]string, 10000)
	uuids := make([]string, 10000)
	rng := rand.New(rand.NewPCG(20240601, 7))
	for i := range s {
		s[i] = fmt.Sprintf("s%d", i)
		conv[i] = fmt.Sprintf("conv-%06d", i)
		uuids[i] = uuidV4(rng)
	}
	return map[string][]string{"s": s, "uuid": uuids, "conv": conv}
}

// uuidV4 formats 128 random bits as an RFC 9562 version-4 UUID.
func uuidV4(rng *rand.Rand) string {
	var b [16]byte
	hi, lo := rng.Uint64(), rng.Uint64()
	for i := range 8 {
		b[i] = byte(hi >> (56 - 8*i))
		b[8+i] = byte(lo >> (56 - 8*i))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// permutations calls fn with every permutation of idx (Heap's algorithm).
func permutations(n int, fn func(perm []int)) {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	c := make([]int, n)
	fn(p)
	for i := 0; i < n; {
		if c[i] < i {
			if i%2 == 0 {
				p[0], p[i] = p[i], p[0]
			} else {
				p[c[i]], p[i] = p[i], p[c[i]]
			}
			fn(p)
			c[i]++
			i = 0
		} else {
			c[i] = 0
			i++
		}
	}
}
