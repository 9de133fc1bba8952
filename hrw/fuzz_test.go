package hrw_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agentserve/sessionaffinity/hrw"
)

// FuzzPick: no panic; the winner is a member with a positive weight and the first
// occurrence of its ID; it equals the naive reference, Best and the Ranker; and it does
// not change when the (deduplicated) set is reversed or rotated.
func FuzzPick(f *testing.F) {
	f.Add("s1", "a,b,c", []byte{16, 16, 16})
	f.Add("session-42", "a,b,a,c,,d", []byte{1, 200, 0, 33, 16, 7})
	f.Add("", "x", []byte{})
	f.Add("conv-000001", "n1,n2,n3,n4,n5,n6,n7,n8", []byte{0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, key, idList string, weights []byte) {
		var nodes []hrw.Node
		for i, id := range strings.Split(idList, ",") {
			if i == 64 {
				break
			}
			w := 1.0
			if i < len(weights) {
				w = float64(weights[i]) / 16 // 0 .. 15.94, including 0
			}
			n, err := hrw.NewNode(id, w)
			if err != nil {
				if id != "" {
					t.Fatalf("NewNode(%q, %g): %v", id, w, err)
				}
				continue
			}
			nodes = append(nodes, n)
		}
		kh := hrw.KeyHash(key)
		got := hrw.Pick(kh, nodes)
		if want := refPick(kh, nodes); got != want {
			t.Fatalf("Pick = %d, reference %d (%v)", got, want, nodes)
		}
		if got >= 0 {
			if nodes[got].Weight() <= 0 {
				t.Fatalf("winner %v has weight 0", nodes[got])
			}
			for j := range got {
				if nodes[j].ID() == nodes[got].ID() {
					t.Fatalf("winner %d is a later copy of %d", got, j)
				}
			}
		}
		var b hrw.Best
		if bi := bestPick(&b, kh, nodes); bi != got {
			t.Fatalf("Best = %d, Pick = %d", bi, got)
		}
		r, err := hrw.New(nodes)
		if err != nil {
			t.Fatal(err)
		}
		rn, ok := r.Pick(kh)
		if ok != (got >= 0) || (ok && rn != nodes[got]) {
			t.Fatalf("Ranker.Pick = %v %v, Pick = %d", rn, ok, got)
		}
		// Order independence over the deduplicated set (so "first copy" is fixed).
		dedup := r.Nodes()
		want := idOf(nodes, got)
		rev := slices.Clone(dedup)
		slices.Reverse(rev)
		if g := idOf(rev, hrw.Pick(kh, rev)); g != want {
			t.Fatalf("reversed: %s, want %s", g, want)
		}
		for s := 1; s < len(dedup); s++ {
			rot := append(slices.Clone(dedup[s:]), dedup[:s]...)
			if g := idOf(rot, hrw.Pick(kh, rot)); g != want {
				t.Fatalf("rotated by %d: %s, want %s", s, g, want)
			}
		}
		if top := hrw.TopK(nil, kh, nodes, 2); (got < 0) != (len(top) == 0) || (got >= 0 && top[0] != got) {
			t.Fatalf("TopK = %v, Pick = %d", top, got)
		}
	})
}

// FuzzPickLarge is FuzzPick above 128 nodes, where Pick with mixed weights scans with a
// rising cap on the weights (skipCap, scanCap): n in 129..640 nodes named "n<i>" (dup
// makes every dup-th node a copy of an earlier ID), weights cycled from the fuzzed bytes
// (w/16, 0 included, so zero and heavy nodes land anywhere). Pick must equal the
// reference.
func FuzzPickLarge(f *testing.F) {
	f.Add("s1", uint16(129), uint8(0), []byte{16, 32, 1, 255})
	f.Add("session-42", uint16(512), uint8(7), []byte{0, 0, 0, 200, 16})
	f.Add("k", uint16(640), uint8(3), []byte{255, 1})
	f.Fuzz(func(t *testing.T, key string, size uint16, dup uint8, weights []byte) {
		n := 129 + int(size)%512
		nodes := make([]hrw.Node, 0, n)
		for i := range n {
			id := "n" + strconv.Itoa(i)
			if dup > 1 && i%int(dup) == 0 && i > 0 {
				id = "n" + strconv.Itoa(i/int(dup))
			}
			w := 1.0
			if len(weights) > 0 {
				w = float64(weights[i%len(weights)]) / 16
			}
			nd, err := hrw.NewNode(id, w)
			if err != nil {
				t.Fatalf("NewNode(%q, %g): %v", id, w, err)
			}
			nodes = append(nodes, nd)
		}
		kh := hrw.KeyHash(key)
		if got, want := hrw.Pick(kh, nodes), refPick(kh, nodes); got != want {
			t.Fatalf("Pick = %d, reference %d (%d nodes, dup %d, weights %v)", got, want, n, dup, weights)
		}
	})
}
