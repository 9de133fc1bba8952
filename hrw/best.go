package hrw

// bestInline is the number of offers a [Best] remembers without a heap buffer.
const bestInline = 64

type offered struct {
	n *Node
	i int
}

// Best is a running-winner accumulator for callers that keep their nodes inside their
// own structs (for example a backend type that embeds a Node) and so cannot pass a
// []Node to [Pick]:
//
//	var b hrw.Best
//	b.Reset(hrw.KeyHash(sessionID))
//	for i := range backends {
//		if eligible(&backends[i]) {
//			b.Offer(i, &backends[i].Node)
//		}
//	}
//	winner := b.Index() // -1: none
//
// For the same sequence of offers it returns exactly what Pick returns for the slice of
// the offered nodes (mapped to the caller's indices): the same canonical order and
// tie-break (equal weights compare m without ln; mixed weights use the same pruning
// bound), and the same duplicate rule — a later offer of an ID already offered is
// ignored even if its weight differs.
// To apply that rule Best remembers the offered pointers; the nodes must not change
// until Index returns.
//
// The zero value is ready to use for keyHash 0; call [Best.Reset] to start a selection.
//
// Cost: Offer is O(1) amortised (the same per-node work as Pick); Index scans the offers
// before the winner once if the weights differ. 0 allocs for up to 64 offers per
// selection; beyond that a buffer is allocated (once for up to 576 offers) and kept
// across Reset, so a reused Best is allocation-free at any size.
//
// A Best is a small mutable value (about 1 KiB): not safe for concurrent use; keep one
// per goroutine (a local variable is fine).
type Best struct {
	kp       uint64  // premix(keyHash)
	bn       *Node   // current best, nil if none
	bi       int     // caller's index of bn
	bp       int     // position of bn among the offers
	l        leader  // bn's m, weight, ID, bounds and score
	count    int     // offers so far
	w0       float64 // weight of the first offer
	varied   bool    // an offer had a weight other than w0
	resolved bool    // Index has checked duplicates for the current best
	inline   [bestInline]offered
	more     []offered // offers past bestInline, reused across Reset
}

// Reset starts a new selection for keyHash, forgetting all offers. It keeps the
// overflow buffer. O(1), 0 allocs.
func (b *Best) Reset(keyHash uint64) {
	more := b.more[:0]
	b.kp, b.bn, b.bi, b.bp, b.count, b.resolved = premix(keyHash), nil, -1, 0, 0, false
	b.w0, b.varied = 0, false
	b.more = more
}

// Offer offers node n, which the caller knows as index i (returned by [Best.Index] if n
// wins). Nodes with weight 0 are remembered (for the duplicate rule) but never win.
// n must not be nil and must stay unchanged until Index returns. O(1) amortised, 0 allocs
// within the limits described on [Best].
func (b *Best) Offer(i int, n *Node) {
	p := b.count
	if p < bestInline {
		b.inline[p] = offered{n: n, i: i}
	} else {
		if b.more == nil {
			b.more = make([]offered, 0, 8*bestInline) // one allocation up to 576 offers
		}
		b.more = append(b.more, offered{n: n, i: i})
	}
	b.count++
	if p == 0 {
		b.w0 = n.weight
	} else if n.weight != b.w0 {
		b.varied = true
	}
	if n.weight == 0 {
		return
	}
	m := finish(b.kp^n.pre) >> 11
	if b.bn == nil {
		b.l.set(n.weight, m, n.id)
	} else if !b.l.beatenBy(n.weight, m, n.id) {
		return
	}
	b.bn, b.bi, b.bp, b.resolved = n, i, p, false
}

// at returns the p-th offer.
func (b *Best) at(p int) offered {
	if p < bestInline {
		return b.inline[p]
	}
	return b.more[p-bestInline]
}

// Index returns the caller's index of the winner among the offers since the last Reset,
// or -1 if nothing with a positive weight was offered. It may be called repeatedly.
// Cost: O(1) if all offered weights are equal; otherwise O(p) where p is the winner's
// position among the offers (a duplicate check); if the winner turns out to be a later
// duplicate (of an ID first offered with another weight) it recomputes the winner with
// duplicates removed, O(n²) in the worst case. 0 allocs.
func (b *Best) Index() int {
	if b.bn == nil {
		return -1
	}
	if !b.resolved {
		// With all weights equal a later copy never beats its first occurrence.
		if b.varied && b.dupBefore(b.bp) {
			b.exact()
		}
		b.resolved = true
	}
	if b.bn == nil {
		return -1
	}
	return b.bi
}

// Node returns a pointer to the winning node as offered, or nil if there is none.
// Same cost as [Best.Index].
func (b *Best) Node() *Node {
	if b.Index() < 0 {
		return nil
	}
	return b.bn
}

func (b *Best) dupBefore(p int) bool {
	n := b.at(p).n
	for q := 0; q < p; q++ {
		o := b.at(q).n
		if o.pre == n.pre && o.id == n.id {
			return true
		}
	}
	return false
}

// exact recomputes the winner over the offers with duplicates removed.
func (b *Best) exact() {
	b.bn = nil
	var best key
	for p := 0; p < b.count; p++ {
		o := b.at(p)
		if o.n.weight == 0 {
			continue
		}
		c := keyOf(b.kp, o.n, p)
		if b.bn != nil && !before(&c, &best) {
			continue
		}
		if b.dupBefore(p) {
			continue
		}
		b.bn, b.bi, b.bp, best = o.n, o.i, p, c
		b.l.set(o.n.weight, c.m, o.n.id)
	}
}
