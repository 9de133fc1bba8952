package hrw_test

import (
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/hrw"
)

func TestNewValidates(t *testing.T) {
	good := mustNode(t, "a", 1)
	tests := []struct {
		name    string
		nodes   []hrw.Node
		wantErr error
	}{
		{"zero node", []hrw.Node{good, {}}, hrw.ErrEmptyID},
		{"NaN weight", []hrw.Node{good, hrw.NodeWithHash("b", 1, math.NaN())}, hrw.ErrInvalidWeight},
		{"negative weight", []hrw.Node{hrw.NodeWithHash("b", 1, -2)}, hrw.ErrInvalidWeight},
		{"+Inf weight", []hrw.Node{hrw.NodeWithHash("b", 1, math.Inf(1))}, hrw.ErrInvalidWeight},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := hrw.New(tt.nodes)
			assert.ErrorIs(t, err, tt.wantErr)
			assert.Nil(t, r)
		})
	}
}

func TestRankerIsImmutable(t *testing.T) {
	in := uniformNodes(t, 4)
	r, err := hrw.New(in)
	require.NoError(t, err)
	kh := hrw.KeyHash("s1")
	want, _ := r.Pick(kh)
	in[0], in[1], in[2], in[3] = hrw.Node{}, hrw.Node{}, hrw.Node{}, hrw.Node{} // caller reuses its slice
	got := r.Nodes()
	got[0] = hrw.Node{} // and modifies the copy
	n, ok := r.Pick(kh)
	assert.True(t, ok)
	assert.Equal(t, want, n)
	assert.Equal(t, []string{"backend-0", "backend-1", "backend-2", "backend-3"}, nodeIDs(r.Nodes()))
	assert.Equal(t, 4, r.Len())
}

// Concurrent readers of one Ranker and of shared []Node (run with -race).
func TestConcurrentUse(t *testing.T) {
	nodes := make([]hrw.Node, 32)
	for i := range nodes {
		nodes[i] = mustNode(t, fmt.Sprintf("backend-%d", i), float64(1+i%3))
	}
	r, err := hrw.New(nodes)
	require.NoError(t, err)
	want := make([]string, 500)
	for k := range want {
		want[k] = nodes[hrw.Pick(hrw.KeyHash(fmt.Sprintf("s%d", k)), nodes)].ID()
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b hrw.Best
			dst := make([]int, 0, 2)
			for k := range want {
				kh := hrw.KeyHash(fmt.Sprintf("s%d", k))
				n, _ := r.Pick(kh)
				b.Reset(kh)
				for i := range nodes {
					b.Offer(i, &nodes[i])
				}
				top := hrw.TopK(dst, kh, nodes, 2)
				if n.ID() != want[k] || nodes[b.Index()].ID() != want[k] || nodes[top[0]].ID() != want[k] {
					errs <- fmt.Sprintf("goroutine %d key %d", g, k)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
