package affinity

import (
	"strings"
	"sync"
	"sync/atomic"
)

// backendReg numbers the backends a Table binds to, table-wide. A backend's number
// indexes every shard's per-backend arrays (shard.bk, shard.slots), so a miss finds its
// winner's bindings list in its shard by number, without a per-shard hash probe; the
// registry itself is small, read-mostly and hot (every miss reads it), and lookups take
// no lock.
//
// Numbers are freed and reused, so that a table whose backends keep changing (reloads
// with new IDs) keeps bounded arrays: each entry counts the shards holding bindings to it
// (shards), and an entry no shard holds is freed when a later add finds the registry at
// twice its size after the previous sweep (sweep). A shard takes its reference (acquire)
// under its lock when its count of bindings to the backend goes from 0 to 1 and drops it
// (release) at 0; acquire fails on a freed entry, and the caller looks the ID up again.
type backendReg struct {
	mu  sync.Mutex
	cur atomic.Pointer[regTable] // nil until the first add
	// Under mu:
	free    []uint32 // freed numbers, reused first
	next    uint32   // numbers below next have been handed out
	used    int      // positions of cur.pos not empty (entries and tombstones)
	live    int      // entries in cur
	sweepAt int      // sweep before an add that would make live exceed this
}

// regEnt is one backend known to the registry under one number, for as long as shards
// hold bindings to it; a freed number gets a new regEnt when reused.
type regEnt struct {
	id     string // interned (the registry's own copy)
	pre    uint64 // premix(hrw.NodeHash(id)), Backend.pre
	shards atomic.Int32
}

// regTable is the registry's lookup structure: an open-addressing index by premixed node
// hash (linear probing, load with tombstones at most 1/2; a position is 0 when empty,
// regTomb when freed, else number+1) and the entries by number (nil: free). Written
// in place under backendReg.mu (atomically: readers do not lock) and replaced by a larger
// copy when full.
type regTable struct {
	pos  []atomic.Uint32
	ents []atomic.Pointer[regEnt]
}

const (
	regTomb      = ^uint32(0)
	regMinSweep  = 64 // no sweep while at most this many entries
	regFirstSize = 16 // entries of the first table
)

// lookup returns the entry of backend id (premixed node hash pre) and its number, adding
// it if absent. The entry may be freed by the time the caller uses it: acquire and held
// report that.
func (r *backendReg) lookup(id string, pre uint64) (*regEnt, uint32) {
	if e, n := r.cur.Load().find(id, pre); e != nil {
		return e, n
	}
	return r.add(id, pre)
}

// find returns the entry of backend id (premixed hash pre) and its number, or nil. rt may
// be nil (an empty registry). Lock-free.
func (rt *regTable) find(id string, pre uint64) (*regEnt, uint32) {
	if rt == nil {
		return nil, 0
	}
	mask := uint64(len(rt.pos) - 1)
	for p := pre & mask; ; p = (p + 1) & mask {
		v := rt.pos[p].Load()
		if v == 0 {
			return nil, 0
		}
		if v == regTomb {
			continue
		}
		if e := rt.ents[v-1].Load(); e != nil && e.pre == pre && e.id == id {
			return e, v - 1
		}
	}
}

// add is lookup's slow path, under mu.
func (r *backendReg) add(id string, pre uint64) (*regEnt, uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rt := r.cur.Load()
	if e, n := rt.find(id, pre); e != nil {
		return e, n
	}
	if r.live >= max(r.sweepAt, regMinSweep) {
		r.sweep(rt)
		r.sweepAt = 2 * r.live
	}
	var n uint32
	if k := len(r.free); k > 0 {
		n, r.free = r.free[k-1], r.free[:k-1]
	} else {
		n = r.next
		r.next++
	}
	if rt == nil || int(n) >= len(rt.ents) || 2*(r.used+1) > len(rt.pos) {
		rt = r.grow(rt, int(n)+1)
	}
	e := &regEnt{id: strings.Clone(id), pre: pre} // never pin a caller's larger buffer
	rt.ents[n].Store(e)
	mask := uint64(len(rt.pos) - 1)
	p := pre & mask
	for v := rt.pos[p].Load(); v != 0 && v != regTomb; v = rt.pos[p].Load() {
		p = (p + 1) & mask
	}
	if rt.pos[p].Load() == 0 {
		r.used++
	}
	rt.pos[p].Store(n + 1) // after the entry: a reader that sees the position sees it
	r.live++
	return e, n
}

// grow publishes a copy of rt (nil: none) with room for at least need numbers and a
// fresh index (no tombstones), and returns it. Under mu.
func (r *backendReg) grow(rt *regTable, need int) *regTable {
	size := regFirstSize
	for size < need || size <= r.live {
		size *= 2
	}
	nt := &regTable{pos: make([]atomic.Uint32, 2*size), ents: make([]atomic.Pointer[regEnt], size)}
	mask := uint64(len(nt.pos) - 1)
	r.used = 0
	if rt != nil {
		for n := range rt.ents {
			e := rt.ents[n].Load()
			if e == nil {
				continue
			}
			nt.ents[n].Store(e)
			p := e.pre & mask
			for nt.pos[p].Load() != 0 {
				p = (p + 1) & mask
			}
			nt.pos[p].Store(uint32(n) + 1)
			r.used++
		}
	}
	r.cur.Store(nt)
	return nt
}

// sweep frees the entries no shard holds: marked dead (acquire then fails), their index
// positions made tombstones and their numbers put on the free list. Under mu.
func (r *backendReg) sweep(rt *regTable) {
	if rt == nil {
		return
	}
	mask := uint64(len(rt.pos) - 1)
	for n := range rt.ents {
		e := rt.ents[n].Load()
		if e == nil || !e.shards.CompareAndSwap(0, -1) {
			continue
		}
		p := e.pre & mask
		for rt.pos[p].Load() != uint32(n)+1 {
			p = (p + 1) & mask
		}
		rt.pos[p].Store(regTomb)
		rt.ents[n].Store(nil)
		r.free = append(r.free, uint32(n))
		r.live--
	}
}

// acquire records that one more shard holds bindings to e; false if e was freed.
func (e *regEnt) acquire() bool {
	for {
		k := e.shards.Load()
		if k < 0 {
			return false
		}
		if e.shards.CompareAndSwap(k, k+1) {
			return true
		}
	}
}

// held reports whether e is not freed. A shard that holds bindings to number n and finds
// e (number n) not freed holds e itself: one entry per number is live at a time, and the
// shard's own reference keeps it so.
func (e *regEnt) held() bool { return e.shards.Load() >= 0 }

// release records that a shard no longer holds bindings to e.
func (e *regEnt) release() { e.shards.Add(-1) }

// entry returns the live entry of number n, which the calling shard holds (so it is
// neither freed nor replaced).
func (r *backendReg) entry(n uint32) *regEnt { return r.cur.Load().ents[n].Load() }

// size returns how many numbers the registry's arrays have room for (tests: the bound).
func (r *backendReg) size() int {
	rt := r.cur.Load()
	if rt == nil {
		return 0
	}
	return len(rt.ents)
}
