package hrw_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/agentserve/sessionaffinity/internal/benchmin"

	rendezvous "github.com/dgryski/go-rendezvous"
	"github.com/zeebo/xxh3"

	"github.com/agentserve/sessionaffinity/hrw"
)

var benchSizes = []int{1, 8, 64, 512, 1024}

// benchKeys are 1024 precomputed 36-byte UUID-like session IDs, used in rotation.
var benchKeys = func() []string {
	rng := rand.New(rand.NewPCG(9, 9))
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = uuidV4(rng)
	}
	return keys
}()

var sink int

func benchNodes(b testing.TB, n int, mixed bool) []hrw.Node {
	rng := rand.New(rand.NewPCG(uint64(n), 1))
	nodes := make([]hrw.Node, n)
	for i := range nodes {
		w := 1.0
		if mixed {
			w = 0.5 + 3.5*rng.Float64()
		}
		nodes[i] = mustNode(b, fmt.Sprintf("backend-%d.pool.svc:8000", i), w)
	}
	return nodes
}

// naivePick is the baseline: hash the concatenation of session and backend ID for every
// backend (allocating the string) and keep the maximum. Its placement is not the one
// this package computes; it is here only to compare the cost.
func naivePick(session string, ids []string) int {
	bi, best := -1, uint64(0)
	for i, id := range ids {
		if h := xxh3.HashString(session + id); bi < 0 || h > best {
			bi, best = i, h
		}
	}
	return bi
}

func BenchmarkNaive(b *testing.B) {
	for _, n := range benchSizes {
		nodes := benchNodes(b, n, false)
		ids := nodeIDs(nodes)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				sink += naivePick(benchKeys[i&1023], ids)
			}
		})
	}
}

// BenchmarkPick includes KeyHash of the session ID in every op, like the naive baseline.
func BenchmarkPick(b *testing.B) {
	for _, n := range benchSizes {
		nodes := benchNodes(b, n, false)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			benchmin.Batched(b, func(i int) { sink += hrw.Pick(hrw.KeyHash(benchKeys[i&1023]), nodes) })
		})
	}
}

func BenchmarkPickWeighted(b *testing.B) {
	for _, n := range benchSizes {
		nodes := benchNodes(b, n, true)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			benchmin.Batched(b, func(i int) { sink += hrw.Pick(hrw.KeyHash(benchKeys[i&1023]), nodes) })
		})
	}
}

// BenchmarkBest loops over a caller struct that embeds a Node, as the affinity package
// does, with a fresh Best per op.
func BenchmarkBest(b *testing.B) {
	type backend struct {
		node hrw.Node
		addr string
	}
	for _, n := range benchSizes {
		nodes := benchNodes(b, n, false)
		backends := make([]backend, n)
		for i := range backends {
			backends[i] = backend{node: nodes[i], addr: "10.0.0.1:8000"}
		}
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				var best hrw.Best
				best.Reset(hrw.KeyHash(benchKeys[i&1023]))
				for j := range backends {
					best.Offer(j, &backends[j].node)
				}
				sink += best.Index()
			}
		})
	}
}

func BenchmarkTopK3(b *testing.B) {
	for _, n := range benchSizes {
		nodes := benchNodes(b, n, false)
		dst := make([]int, 0, 3)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				dst = hrw.TopK(dst, hrw.KeyHash(benchKeys[i&1023]), nodes, 3)
				sink += dst[0]
			}
		})
	}
}

func BenchmarkRankerPick(b *testing.B) {
	benchRankerPick(b, func(n int) []hrw.Node { return benchNodes(b, n, false) })
}

// BenchmarkFloor is the in-situ lower bound for Pick: KeyHash plus a max of Mix over a
// contiguous []uint64 of node hashes, with no weights, IDs, ties or duplicates. Use it
// to read Pick's overhead on the machine at hand ("~7 ns + 1.45 ns per backend").
func BenchmarkFloor(b *testing.B) {
	for _, n := range benchSizes {
		nodes := benchNodes(b, n, false)
		hs := make([]uint64, n)
		for i := range nodes {
			hs[i] = nodes[i].Hash()
		}
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				k := hrw.KeyHash(benchKeys[i&1023])
				bi, best := 0, uint64(0)
				for j, h := range hs {
					if m := hrw.Mix(k, h); m > best {
						bi, best = j, m
					}
				}
				sink += bi
			}
		})
	}
}

// BenchmarkRendezvous is the reference the issue sets: github.com/dgryski/go-rendezvous
// (a loop of one xorshift-multiply mix and one compare over contiguous node hashes),
// with xxh3 as its hash so that it hashes the key exactly as KeyHash does. Its placement
// differs from this package's; only the cost is compared (goal: Pick and Ranker.Pick with
// equal weights <= 1.0x this, same sizes, same run).
func BenchmarkRendezvous(b *testing.B) {
	for _, n := range benchSizes {
		ids := nodeIDs(benchNodes(b, n, false))
		r := rendezvous.New(ids, xxh3.HashString)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			benchmin.Batched(b, func(i int) { sink += len(r.Lookup(benchKeys[i&1023])) })
		})
	}
}

func BenchmarkRankerPickWeighted(b *testing.B) {
	for _, n := range benchSizes {
		r, err := hrw.New(benchNodes(b, n, true))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			benchmin.Batched(b, func(i int) {
				node, _ := r.Pick(hrw.KeyHash(benchKeys[i&1023]))
				sink += len(node.ID())
			})
		})
	}
}

// fewWeightNodes is benchNodes with the weights a real fleet has: a few sizes of
// backend, here 1, 2, 3 or 4 at random (up to 4 distinct weights).
func fewWeightNodes(b testing.TB, n int) []hrw.Node {
	rng := rand.New(rand.NewPCG(uint64(n), 2))
	nodes := make([]hrw.Node, n)
	for i := range nodes {
		nodes[i] = mustNode(b, fmt.Sprintf("backend-%d.pool.svc:8000", i), float64(1+rng.IntN(4)))
	}
	return nodes
}

func BenchmarkPickFewWeights(b *testing.B) {
	for _, n := range benchSizes {
		nodes := fewWeightNodes(b, n)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			benchmin.Batched(b, func(i int) { sink += hrw.Pick(hrw.KeyHash(benchKeys[i&1023]), nodes) })
		})
	}
}

func BenchmarkRankerPickFewWeights(b *testing.B) {
	benchRankerPick(b, func(n int) []hrw.Node { return fewWeightNodes(b, n) })
}

// benchRankerPick measures Ranker.Pick over a Ranker of nodes(n) for each bench size.
func benchRankerPick(b *testing.B, nodes func(n int) []hrw.Node) {
	for _, n := range benchSizes {
		r, err := hrw.New(nodes(n))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			benchmin.Batched(b, func(i int) {
				node, _ := r.Pick(hrw.KeyHash(benchKeys[i&1023]))
				sink += len(node.ID())
			})
		})
	}
}
