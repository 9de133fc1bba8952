package affinity

import (
	"sync/atomic"
	"unsafe"

	"github.com/agentserve/sessionaffinity/hrw"
)

// candCache remembers, for a few recently walked candidate lists, what the bounded-load
// walk resolves per candidate before it reads any load: the candidate's load record and
// whether it is a later copy of an earlier ID (the walk ignores those). A gateway passes
// the same Backend values on every call, so a walk over a remembered list reads these from
// one contiguous array instead of probing the load table and checking duplicates per
// candidate.
//
// A list is recognised by its candidates' ID strings — the same pointer and length at
// every position (the entry keeps the strings, so their memory cannot be reused for other
// IDs) — never by the slice itself, which may be rebuilt per request. The
// weights, health and loads are not cached: the walk reads them on every call, so a hit
// of the cache gives exactly the walk's result without it.
//
// Lists that are not remembered take the full resolution; one of every candCacheEvery such
// walks (the first included) stores its result in the slot its list hashes to, with one
// allocation (O(len(candidates))), so a stable list is cached after its first walk and
// callers whose lists never repeat pay an allocation per candCacheEvery walks at most.
type candCache struct {
	slots [candCacheSlots]atomic.Pointer[[]candEntry]
	miss  atomic.Uint32
}

const (
	candCacheSlots = 4  // lists remembered (a power of two)
	candCacheEvery = 16 // walks over lists not remembered per refresh of a slot
)

// candEntry is one remembered candidate: its ID string (to recognise it)
// and its load record (nil: a later copy of an earlier ID).
type candEntry struct {
	id string
	bl *backendLoad
}

// candSlot picks the slot of a candidate list (non-empty) by its length and the pointer
// of its first ID.
func candSlot(cands []Backend) int {
	p := uintptr(unsafe.Pointer(unsafe.StringData(cands[0].node.ID())))
	return int((p>>4 ^ p>>12 ^ uintptr(len(cands))) & (candCacheSlots - 1))
}

// list returns the remembered list in the slot of cands if it has cands' length (the
// caller must still check every candidate against it, as resolve does), else nil.
func (c *candCache) list(cands []Backend) []candEntry {
	if p := c.slots[candSlot(cands)].Load(); p != nil && len(*p) == len(cands) {
		return *p
	}
	return nil
}

// matches reports whether candidate n is the one remembered in e: the very same ID string
// (pointer and length; e keeps it, so its memory holds no other ID).
func (e *candEntry) matches(n *hrw.Node) bool {
	id := n.ID()
	return unsafe.StringData(id) == unsafe.StringData(e.id) && len(id) == len(e.id)
}

// resolve fills bl with the remembered load records of cands (nil for a later copy of an
// ID) and reports true, or reports false when cands is not a remembered list (bl is then
// partly written). O(len(cands)) compares, no atomic writes, 0 allocs.
func (c *candCache) resolve(cands []Backend, bl []*backendLoad) bool {
	p := c.slots[candSlot(cands)].Load()
	if p == nil || len(*p) != len(cands) {
		return false
	}
	for i := range *p {
		e := &(*p)[i]
		if !e.matches(&cands[i].node) {
			return false
		}
		bl[i] = e.bl
	}
	return true
}

// remember stores the resolution bl of cands (valid candidates only), one time in
// candCacheEvery.
func (c *candCache) remember(cands []Backend, bl []*backendLoad) {
	if c.miss.Add(1)%candCacheEvery != 1 {
		return
	}
	es := make([]candEntry, len(cands))
	for i := range cands {
		es[i] = candEntry{id: cands[i].node.ID(), bl: bl[i]}
	}
	c.slots[candSlot(cands)].Store(&es)
}
