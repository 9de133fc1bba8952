package main

import (
	"fmt"

	"github.com/agentserve/sessionaffinity/hrw"
)

// hrwPolicy routes by rendezvous hashing of the session ID over the up backends, with no
// binding table: a session stays put while the backend set is stable, and a session whose
// backend goes down moves to its runner-up — and moves back when it returns.
type hrwPolicy struct{ nodes []hrw.Node }

func newHRWPolicy(n int) (Policy, error) {
	p := &hrwPolicy{nodes: make([]hrw.Node, n)}
	for i := range p.nodes {
		node, err := hrw.NewNode(BackendID(i), 1)
		if err != nil {
			return nil, fmt.Errorf("tracereplay: hrw node %d: %w", i, err)
		}
		p.nodes[i] = node
	}
	return p, nil
}

func (*hrwPolicy) Name() string { return "hrw" }

func (p *hrwPolicy) Route(t Turn, c *Cluster) (Decision, error) {
	i := hrw.PickFunc(hrw.KeyHash(t.Session), p.nodes, c.Up)
	if i < 0 {
		return Decision{}, ErrNoBackendUp
	}
	return Decision{Backend: i}, nil
}
