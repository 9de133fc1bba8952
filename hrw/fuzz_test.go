package hrw_test

import (
	"slices"
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
