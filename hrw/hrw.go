package hrw

import (
	"errors"
	"fmt"
	"math"

	"github.com/zeebo/xxh3"
)

// Sentinel errors. They are returned wrapped with the offending value; branch with
// [errors.Is].
var (
	// ErrEmptyID reports a node with an empty ID.
	ErrEmptyID = errors.New("hrw: empty node ID")
	// ErrInvalidWeight reports a weight that is negative, NaN, infinite, or outside
	// [MinWeight, MaxWeight] while not 0.
	ErrInvalidWeight = errors.New("hrw: invalid weight")
)

// Weight bounds. A valid weight is 0 (the node never wins) or a value in
// [MinWeight, MaxWeight]. The bounds keep every score s = -w/ln(u) a finite, normal
// float64 (-ln(u) lies in [2^-53, 54·ln 2]), which is what makes the pruning bound of
// the weighted path exact; they are far outside any practical weight.
const (
	MinWeight = 1e-280
	MaxWeight = 1e280
)

// Node is one member of a rendezvous set: an ID, its precomputed [NodeHash] and a weight.
//
// Build it with [NewNode]; a Node is an immutable value and cheap to copy (32 bytes).
// It stores the node hash with the first xorshift of splitmix64 already applied (see
// premix), which saves two operations per node in every selection.
// The zero Node has an empty ID and weight 0: it never wins and is skipped by every
// selection function, but [New] rejects it with [ErrEmptyID].
type Node struct {
	id     string
	pre    uint64 // premix(NodeHash(id))
	weight float64
}

// NewNode returns the node with the given ID and weight, precomputing [NodeHash](id).
// The ID must be non-empty ([ErrEmptyID]); the weight must be 0 or within
// [MinWeight, MaxWeight] ([ErrInvalidWeight] for negative, NaN, ±Inf or out-of-range
// values). Weights are relative: only ratios matter; with all weights equal the
// weighted and unweighted methods give the same placement.
//
// Cost: one xxh3 hash of id, 0 allocs on success.
func NewNode(id string, weight float64) (Node, error) {
	if id == "" {
		return Node{}, ErrEmptyID
	}
	if !validWeight(weight) {
		return Node{}, fmt.Errorf("%w: %v (node %q)", ErrInvalidWeight, weight, id)
	}
	if weight == 0 {
		weight = 0 // -0 -> +0: equal weights have equal bits (the fast path compares bits)
	}
	return Node{id: id, pre: premix(NodeHash(id)), weight: weight}, nil
}

func validWeight(w float64) bool {
	return w == 0 || (w >= MinWeight && w <= MaxWeight) // false for NaN
}

// ID returns the node's ID. O(1).
func (n Node) ID() string { return n.id }

// Hash returns [NodeHash] of the node's ID, computed once by [NewNode]. O(1).
func (n Node) Hash() uint64 { return unpremix(n.pre) }

// Weight returns the node's weight (0 = never wins). O(1).
func (n Node) Weight() float64 { return n.weight }

// String returns "id" for weight 1 and "id(w=weight)" otherwise. For logs; O(len(id)).
func (n Node) String() string {
	if n.weight == 1 {
		return n.id
	}
	return fmt.Sprintf("%s(w=%g)", n.id, n.weight)
}

// KeyHash returns XXH3_64bits(key) with seed 0, the hash of a session key. Compute it
// once per request and pass it to every selection function.
// Cost: O(len(key)), 0 allocs.
func KeyHash(key string) uint64 { return xxh3.HashString(key) }

// NodeHash returns splitmix64(XXH3_64bits(id)), the per-node hash stored in a [Node].
// Cost: O(len(id)), 0 allocs.
func NodeHash(id string) uint64 { return splitmix64(xxh3.HashString(id)) }

// Mix returns splitmix64(keyHash ^ nodeHash), the 64-bit value from which a node's
// score for a key is derived. Cost: O(1), 0 allocs.
func Mix(keyHash, nodeHash uint64) uint64 { return splitmix64(keyHash ^ nodeHash) }

// splitmix64 is the output function (finalizer) of SplitMix64 with the constants of
// Vigna's splitmix64.c.
func splitmix64(x uint64) uint64 { return finish(premix(x)) }

// premix is the first step of splitmix64, x ^ x>>30. It is linear over XOR, so
// premix(k ^ n) = premix(k) ^ premix(n): a selection premixes the key hash once and
// finishes premix(k) ^ node.pre per node, exactly splitmix64(k ^ n).
func premix(x uint64) uint64 { return x ^ x>>30 }

// unpremix inverts premix: if y = x ^ x>>30 then x = y ^ y>>30 ^ y>>60.
func unpremix(y uint64) uint64 { return y ^ y>>30 ^ y>>60 }

// finish is splitmix64 after its first step: two multiply-xorshift rounds.
func finish(x uint64) uint64 { return last(mid(x)) }

// mid is finish without its final xorshift: z = mid(x) and finish(x) = last(z).
// last keeps the top 31 bits of z (z>>31 has 31 leading zeros), so if two nodes' mid
// values differ there (z>>33 differs) their m values, the top 53 bits of finish, are
// ordered the same way. The selection loops compare mid values and apply last only
// when the top 31 bits tie (about n·2^-31 per selection): three operations saved per
// node.
func mid(x uint64) uint64 { return newMixer().mid(x) }

// mixer carries mid's two multipliers and the mask ^low33 as values. The selection loops
// take one as an argument (built by newMixer at the call), so that the constants stay in
// registers: inside a loop the compiler would rematerialize each 64-bit constant, three
// 10-byte instructions per node. Such loops must not be inlined (where the values would
// become constants again).
type mixer struct{ k1, k2, hi uint64 }

func newMixer() mixer { return mixer{0xbf58476d1ce4e5b9, 0x94d049bb133111eb, ^uint64(low33)} }

func (c mixer) mid(x uint64) uint64 {
	x *= c.k1
	x ^= x >> 27
	return x * c.k2
}

// last is splitmix64's final xorshift.
func last(z uint64) uint64 { return z ^ z>>31 }

// low33 masks the bits of a mid value below its top 31: z &^ low33 is the part that
// decides the order on its own; the selection loops keep an index in the rest.
const low33 = 1<<33 - 1

// Unit maps a [Mix] value to u in the open interval (0,1): with m = mixed>>11 (the top
// 53 bits), u = m·2^-53, except u = 2^-54 when m == 0. The result is exact (no rounding).
// Cost: O(1), 0 allocs.
func Unit(mixed uint64) float64 { return unit(mixed >> 11) }

func unit(m uint64) float64 {
	if m == 0 {
		return 0x1p-54
	}
	return float64(int64(m)) * 0x1p-53 // m < 2^53: exact, and the cheap signed conversion
}

// Score returns node n's weighted rendezvous score for the key: s = -w / ln(u) with
// u = [Unit]([Mix](keyHash, n.Hash())), or 0 when the weight is 0. Higher wins. For a
// valid positive weight s is finite, positive and normal.
// Cost: O(1), one ln, 0 allocs.
func Score(keyHash uint64, n Node) float64 {
	if n.weight == 0 {
		return 0
	}
	return score(n.weight, finish(premix(keyHash)^n.pre)>>11)
}

// score is -w/ln(u(m)) for w > 0.
func score(w float64, m uint64) float64 { return -w / math.Log(unit(m)) }

// pruneMargin is the relative safety margin of the pruning bound: a node with weight w
// and u(m) is skipped without computing its score only when w·pruneMargin < s·(1-u),
// where s is the score it must beat. Rounding in ln, the division and the products is
// a few ulps (~1e-15), so the skip can never drop a node whose computed score would
// have reached s.
const pruneMargin = 1 + 1e-9

// pruneScale returns c = s·2^-53/pruneMargin, so that the skip test for a node (w, m)
// becomes w < c·(2^53-m): one conversion, one product and one compare per node. (For
// m == 0, 2^53-m gives 1-u = 1 instead of 1-2^-54; the margin covers that too.)
func pruneScale(s float64) float64 { return s * (0x1p-53 / pruneMargin) }

// below reports that a node (w, m) provably scores below the score s behind c =
// pruneScale(s): by -ln(u) >= 1-u its score is at most w/(1-u). 2^53-m < 2^53 converts
// exactly (as a signed integer, which is the cheap conversion).
func below(w float64, m uint64, c float64) bool {
	return w < c*float64(int64(1<<53-m))
}

// bounds returns a lower and an upper bound of score(w, m) (w > 0) without a logarithm,
// each widened by the relative margin 1e-9 so that they also bound the computed score:
// with x = 1/u >= 1, 2(x-1)/(x+1) <= ln x <= (x-1)/sqrt(x), that is
// 2(1-u)/(1+u) <= -ln(u) <= (1-u)/sqrt(u), hence w·sqrt(u)/(1-u) <= s <= w(1+u)/(2(1-u)).
// For u near 1, where winners are, the two bounds differ by a factor of about
// 1 + (1-u)²/8, so two scores that differ by more than that are ordered without ln.
// The third result is 0 (the score is not known yet).
func bounds(w float64, m uint64) (lo, hi, s float64) {
	u := unit(m)
	r := w / (float64(int64(1<<53-m)) * 0x1p-53) // w/(1-u)
	return r * math.Sqrt(u) * (1 - 1e-9), r * (1 + u) * (0.5 + 0.5e-9), 0
}

// loses is below for a score s.
func loses(w float64, m uint64, s float64) bool { return below(w, m, pruneScale(s)) }

// key is one node's position in the canonical order for a fixed key hash.
type key struct {
	m  uint64  // Mix >> 11
	s  float64 // score; 0 = not computed yet
	w  float64 // weight (> 0)
	id string
	i  int // caller's index (last tie-break: duplicates)
}

// keyOf returns the key of node n (index i) for the premixed key hash kp.
func keyOf(kp uint64, n *Node, i int) key {
	return key{m: finish(kp^n.pre) >> 11, w: n.weight, id: n.id, i: i}
}

// before reports whether a ranks strictly before b in the canonical order: higher score,
// then higher m, then smaller ID, then smaller index. Equal weights compare m directly
// (the score is monotone in m for a fixed weight), so no ln is taken. It caches the
// scores it computes in a and b.
func before(a, b *key) bool {
	if a.w != b.w {
		if a.s == 0 {
			a.s = score(a.w, a.m)
		}
		if b.s == 0 {
			b.s = score(b.w, b.m)
		}
		if a.s != b.s {
			return a.s > b.s
		}
	}
	if a.m != b.m {
		return a.m > b.m
	}
	if a.id != b.id {
		return a.id < b.id
	}
	return a.i < b.i
}
