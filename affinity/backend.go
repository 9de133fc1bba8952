package affinity

import (
	"fmt"
	"math"

	"github.com/agentserve/sessionaffinity/hrw"
)

// Backend is one inference server a session can be bound to: a stable ID (what HRW
// hashes and what bindings remember), an address (opaque to this package; typically a base
// URL) and a relative weight. Build it once with [NewBackend] (which precomputes the ID
// hash) and reuse it across calls; it is 64 bytes and cheap to pass by value. The zero
// Backend is invalid (empty ID): SelectBackend rejects it with ErrInvalidBackend.
type Backend struct {
	node hrw.Node
	addr string
	// What the hit's candidate check and the miss's HRW loops read, beside the node (whose
	// fields hrw keeps to itself): the node hash premixed (see premix; 0 only for the zero
	// Backend) and the weight's bits (equal weights have equal bits: NewBackend admits no
	// -0 or NaN).
	pre, wbits uint64
}

// NewBackend validates and builds a Backend. id must be non-empty and at most
// MaxBackendIDBytes (4 KiB, the longest a binding snapshot holds) bytes long, else
// ErrInvalidBackend; weight 0 means 1 (the default), otherwise it must lie in
// [hrw.MinWeight, hrw.MaxWeight] (negative, NaN, Inf or out of range is ErrInvalidBackend wrapping hrw.ErrInvalidWeight).
// HRW shares are proportional to weight. addr is stored as is. Cost: one xxh3 hash of id,
// 0 allocs on success.
func NewBackend(id, addr string, weight float64) (Backend, error) {
	if id == "" {
		return Backend{}, fmt.Errorf("%w: empty ID (addr %s)", ErrInvalidBackend, errTrunc(addr))
	}
	if len(id) > MaxBackendIDBytes {
		return Backend{}, fmt.Errorf("%w: ID of %d bytes (max %d): %s", ErrInvalidBackend, len(id), MaxBackendIDBytes, errTrunc(id))
	}
	if weight == 0 {
		weight = 1
	}
	n, err := hrw.NewNode(id, weight)
	if err != nil {
		return Backend{}, fmt.Errorf("%w: %s: %w", ErrInvalidBackend, errTrunc(id), err)
	}
	if n.Weight() <= 0 { // weight was negative zero or NaN slipped through: be strict
		return Backend{}, fmt.Errorf("%w: %s: weight %v: %w", ErrInvalidBackend, errTrunc(id), weight, hrw.ErrInvalidWeight)
	}
	return Backend{node: n, addr: addr, pre: premix(n.Hash()), wbits: math.Float64bits(n.Weight())}, nil
}

// MustBackend is NewBackend that panics on error, for static backend lists in code and
// examples.
func MustBackend(id, addr string, weight float64) Backend {
	b, err := NewBackend(id, addr, weight)
	if err != nil {
		panic(err)
	}
	return b
}

// ID returns the backend's stable ID ("" for the zero Backend).
func (b Backend) ID() string { return b.node.ID() }

// Addr returns the address given to NewBackend.
func (b Backend) Addr() string { return b.addr }

// Weight returns the relative HRW weight (1 when NewBackend got 0; 0 for the zero Backend).
func (b Backend) Weight() float64 { return b.node.Weight() }

// Node returns the hrw.Node of the backend (ID, precomputed hash, weight), for callers
// that want to reproduce placements with package hrw.
func (b Backend) Node() hrw.Node { return b.node }

// String returns "id@addr".
func (b Backend) String() string { return b.node.ID() + "@" + b.addr }
