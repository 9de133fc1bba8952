package hrw_test

import (
	"fmt"

	"github.com/agentserve/sessionaffinity/hrw"
)

func Example() {
	var nodes []hrw.Node
	for _, id := range []string{"vllm-a", "vllm-b", "vllm-c"} {
		n, err := hrw.NewNode(id, 1)
		if err != nil {
			panic(err)
		}
		nodes = append(nodes, n)
	}
	k := hrw.KeyHash("session-42") // once per request
	fmt.Println("winner:", nodes[hrw.Pick(k, nodes)].ID())
	for _, i := range hrw.Rank(k, nodes) {
		fmt.Println("rank:", nodes[i].ID())
	}
	// Output:
	// winner: vllm-b
	// rank: vllm-b
	// rank: vllm-c
	// rank: vllm-a
}

func ExamplePick_weighted() {
	a, _ := hrw.NewNode("small", 1)
	b, _ := hrw.NewNode("large", 3) // wins about 3/4 of the keys
	nodes := []hrw.Node{a, b}
	wins := map[string]int{}
	for i := range 10000 {
		wins[nodes[hrw.Pick(hrw.KeyHash(fmt.Sprintf("s%d", i)), nodes)].ID()]++
	}
	fmt.Println(wins["small"], wins["large"])
	// Output: 2484 7516
}

func ExamplePickFunc() {
	nodes := []hrw.Node{}
	for _, id := range []string{"vllm-a", "vllm-b", "vllm-c"} {
		n, _ := hrw.NewNode(id, 1)
		nodes = append(nodes, n)
	}
	down := map[string]bool{"vllm-b": true}
	k := hrw.KeyHash("session-42")
	i := hrw.PickFunc(k, nodes, func(i int) bool { return !down[nodes[i].ID()] })
	fmt.Println(nodes[i].ID())
	// Output: vllm-c
}

func ExampleTopK() {
	nodes := []hrw.Node{}
	for _, id := range []string{"vllm-a", "vllm-b", "vllm-c", "vllm-d"} {
		n, _ := hrw.NewNode(id, 1)
		nodes = append(nodes, n)
	}
	var buf [2]int // no allocation
	for _, i := range hrw.TopK(buf[:0], hrw.KeyHash("session-42"), nodes, 2) {
		fmt.Println(nodes[i].ID())
	}
	// Output:
	// vllm-b
	// vllm-d
}

// A caller's backend type embeds a Node; Best finds the winner without building a
// []Node.
func ExampleBest() {
	type backend struct {
		node hrw.Node
		addr string
	}
	var backends []backend
	for i, id := range []string{"vllm-a", "vllm-b", "vllm-c"} {
		n, _ := hrw.NewNode(id, 1)
		backends = append(backends, backend{node: n, addr: fmt.Sprintf("10.0.0.%d:8000", i+1)})
	}
	var b hrw.Best
	b.Reset(hrw.KeyHash("session-42"))
	for i := range backends {
		b.Offer(i, &backends[i].node)
	}
	fmt.Println(backends[b.Index()].addr)
	// Output: 10.0.0.2:8000
}

func ExampleRanker() {
	a, _ := hrw.NewNode("vllm-a", 1)
	b, _ := hrw.NewNode("vllm-b", 2)
	c, _ := hrw.NewNode("vllm-c", 1)
	r, err := hrw.New([]hrw.Node{a, b, c, a}) // the duplicate collapses
	if err != nil {
		panic(err)
	}
	fmt.Println(len(r.Nodes()))
	n, ok := r.Pick(hrw.KeyHash("session-42"))
	fmt.Println(n.ID(), ok)
	fmt.Println(r.Rank(hrw.KeyHash("session-42")))
	// Output:
	// 3
	// vllm-b true
	// [vllm-b(w=2) vllm-c vllm-a]
}

func ExampleNewNode_errors() {
	_, err := hrw.NewNode("vllm-a", -1)
	fmt.Println(err)
	_, err = hrw.NewNode("", 1)
	fmt.Println(err)
	// Output:
	// hrw: invalid weight: -1 (node "vllm-a")
	// hrw: empty node ID
}
