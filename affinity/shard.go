package affinity

import (
	"strings"
	"sync"

	"github.com/agentserve/sessionaffinity/health"
	"github.com/agentserve/sessionaffinity/hrw"
	"github.com/agentserve/sessionaffinity/metrics"
)

const (
	// The shard count is fixed (not derived from GOMAXPROCS) so that eviction order, and
	// thus every test, is the same on every machine. Fewer shards when the cap is small,
	// so that each shard holds at least minPerShard bindings.
	maxShards   = 64
	minPerShard = 16

	// Entries live in fixed-size chunks: growth never copies, and the unused tail is at
	// most one chunk (12 KiB) per shard.
	chunkShift = 8
	chunkSize  = 1 << chunkShift
	chunkMask  = chunkSize - 1

	// Expired bindings reclaimed from each LRU list's tail per insert (amortized sweep).
	reclaimPerInsert = 2
)

// entry is one binding. 48 bytes, no pointers but the key; linked by uint32 indices
// (0 = none) into two intrusive doubly-linked lists: the LRU list of its TTL class and the
// list of its backend. A free entry's next links the free list.
type entry struct {
	key          string // len(tier) byte + tier + session ID; owned (one allocation)
	lastUse      int64  // nanoseconds since the table's clock base
	prev, next   uint32 // LRU list of class (front = most recent)
	bprev, bnext uint32 // list of the backend slot
	slot         uint32 // index into shard.slots
	class        uint8  // TTL class (index into Table.ttls)
	lflags       uint8  // load-awareness state of the binding (see lease.go); 0 on insert
	lprompt      uint16 // last reported prompt tokens, in units of 64 (see lease.go)
}

type lruList struct{ head, tail uint32 }

// backendSlot is a backend known to one shard: its interned ID, its hrw node hash premixed
// as each Backend carries it (for fast candidate matching) and the head of its bindings
// list. Freed at count 0. hint and
// hintID remember where a hit last found this backend among the caller's candidates (the
// index and that candidate's ID string, whose bytes are usually those of every later
// call's candidate) so that the next hit can confirm it without a search (findSlot).
// hstate and hver cache the backend's health state for the hit (Scheduler.slotState).
type backendSlot struct {
	id     string
	hintID string // a candidate's ID equal to id (the caller's string: short, pinned)
	pre    uint64 // premix(hrw.NodeHash(id)), Backend.pre
	head   uint32
	count  uint32
	hint   uint32
	hstate health.State // the health set's State(id) at Version hver (0: not read yet)
	hver   uint64
	bl     *backendLoad // the backend's load record (Scheduler leases), cached; nil until used
}

// counters are plain integers guarded by the shard lock; Stats sums them.
type counters struct {
	hits, misses, evictions, expired uint64
	parentPlaced                     uint64 // misses placed on the parent's backend
	broken                           [metrics.NumReasons + 1]uint64
}

type shard struct {
	// What a hit writes comes first, in one cache line: the lock, the heads of the first
	// listInline LRU lists and the counters (hits first). What it only reads follows: the
	// index, the chunk table, the lists' header and the backend slots. So a hit after one
	// on another core moves one line of the shard (besides the entries); the lines it only
	// reads stay shared.
	mu       sync.Mutex
	listBuf  [listInline]lruList // lists' storage for up to listInline TTL classes
	c        counters
	idx      index
	chunks   []*[chunkSize]entry
	lists    []lruList // one per TTL class; each sorted by lastUse, newest first
	slots    []backendSlot
	free     uint32 // free-list head
	next     uint32 // next never-used index (starts at 1: index 0 means none)
	n        int    // live bindings
	cap      int
	slotFree []uint32
	slotIdx  slotIndex
	_        [16]byte // size 320, a multiple of 64: shards start on their own lines
}

// listInline is the number of TTL classes whose LRU list heads live in the shard's first
// cache line (more classes get their own array, a line of its own).
const listInline = 4

func (sh *shard) at(i uint32) *entry { return &sh.chunks[i>>chunkShift][i&chunkMask] }

func (sh *shard) alloc() uint32 {
	if i := sh.free; i != 0 {
		sh.free = sh.at(i).next
		return i
	}
	i := sh.next
	if int(i>>chunkShift) == len(sh.chunks) {
		sh.chunks = append(sh.chunks, new([chunkSize]entry))
	}
	sh.next++
	return i
}

func (sh *shard) pushFront(l *lruList, i uint32, e *entry) {
	e.prev, e.next = 0, l.head
	if l.head != 0 {
		sh.at(l.head).prev = i
	} else {
		l.tail = i
	}
	l.head = i
}

func (sh *shard) unlink(l *lruList, e *entry) {
	if e.prev != 0 {
		sh.at(e.prev).next = e.next
	} else {
		l.head = e.next
	}
	if e.next != 0 {
		sh.at(e.next).prev = e.prev
	} else {
		l.tail = e.prev
	}
}

// touch makes entry i the most recent of its list with lastUse = now. If a concurrent
// call with a later clock reading got the lock first, now is raised to that reading so
// that each list stays sorted by lastUse (the later reading is still a time during this
// call); this keeps Sweep and eviction exact at O(1) per binding.
func (sh *shard) touch(i uint32, e *entry, now int64) {
	l := &sh.lists[e.class]
	if h := sh.at(l.head).lastUse; h > now {
		now = h
	}
	if l.head != i {
		sh.unlink(l, e)
		sh.pushFront(l, i, e)
	}
	e.lastUse = now
}

// slotFor returns the index of the slot of backend id (premixed node hash pre), creating
// it if the shard has none.
func (sh *shard) slotFor(id string, pre uint64) uint32 {
	if si, ok := sh.slotIdx.find(sh.slots, pre, id); ok {
		return si
	}
	var si uint32
	if n := len(sh.slotFree); n > 0 {
		si = sh.slotFree[n-1]
		sh.slotFree = sh.slotFree[:n-1]
	} else {
		si = uint32(len(sh.slots))
		sh.slots = append(sh.slots, backendSlot{})
	}
	id = strings.Clone(id) // never pin a caller's larger buffer
	sh.slots[si] = backendSlot{id: id, pre: pre}
	sh.slotIdx.add(sh.slots, si)
	return si
}

// insert stores a new binding to backend id (premixed node hash pre; the key must be
// absent), first reclaiming a few expired bindings and, at the cap, evicting the shard's
// least-recently-used one (returned).
func (sh *shard) insert(t *Table, h uint32, tier, session string, cls uint8, id string, pre uint64, now int64) (evictedTier string, evicted bool) {
	sh.reclaim(t, now, reclaimPerInsert)
	if sh.n >= sh.cap {
		if v := sh.lru(); v != 0 {
			evictedTier = tierOf(sh.at(v).key)
			sh.remove(v)
			sh.c.evictions++
			evicted = true
		}
	}
	si := sh.slotFor(id, pre)
	i := sh.alloc()
	e := sh.at(i)
	e.key = makeKey(tier, session) // the miss path's one allocation
	e.class = cls
	e.slot = si
	l := &sh.lists[cls]
	if l.head != 0 {
		if h := sh.at(l.head).lastUse; h > now {
			now = h
		}
	}
	e.lastUse = now
	sh.pushFront(l, i, e)
	s := &sh.slots[si]
	e.bprev, e.bnext = 0, s.head
	if s.head != 0 {
		sh.at(s.head).bprev = i
	}
	s.head = i
	s.count++
	sh.idx.add(h, i)
	sh.n++
	return evictedTier, evicted
}

// remove deletes binding i from the map and both lists and frees it. Counts nothing.
func (sh *shard) remove(i uint32) {
	sh.removeHashed(i, uint32(hrw.KeyHash(sessionOf(sh.at(i).key))))
}

// removeHashed is remove of binding i whose key hash's low 32 bits are h.
func (sh *shard) removeHashed(i, h uint32) {
	e := sh.at(i)
	sh.idx.del(h, i)
	sh.unlink(&sh.lists[e.class], e)
	s := &sh.slots[e.slot]
	if e.bprev != 0 {
		sh.at(e.bprev).bnext = e.bnext
	} else {
		s.head = e.bnext
	}
	if e.bnext != 0 {
		sh.at(e.bnext).bprev = e.bprev
	}
	s.count--
	if s.count == 0 {
		sh.slotIdx.del(sh.slots, e.slot)
		*s = backendSlot{}
		sh.slotFree = append(sh.slotFree, e.slot)
	}
	*e = entry{next: sh.free}
	sh.free = i
	sh.n--
}

// reclaim removes up to limit (all if limit < 0) expired bindings from the tail of each
// TTL class list and counts them as expired.
func (sh *shard) reclaim(t *Table, now int64, limit int) int {
	n := 0
	for c := range sh.lists {
		l := &sh.lists[c]
		ttl := t.ttls[c]
		for k := 0; l.tail != 0 && (limit < 0 || k < limit); k++ {
			if now-sh.at(l.tail).lastUse < ttl {
				break
			}
			sh.remove(l.tail)
			n++
		}
	}
	sh.c.expired += uint64(n)
	return n
}

// lru returns the least-recently-used binding of the shard: the oldest tail among the
// TTL class lists (ties: lowest class). O(distinct TTLs).
func (sh *shard) lru() uint32 {
	var v uint32
	var vt int64
	for c := range sh.lists {
		if t := sh.lists[c].tail; t != 0 {
			if lu := sh.at(t).lastUse; v == 0 || lu < vt {
				v, vt = t, lu
			}
		}
	}
	return v
}

// makeKey returns the binding key of (tier, session): one byte len(tier), the tier, the
// session ID. The length prefix makes the encoding injective. One allocation, which also
// copies the session ID (the table never pins a caller's request buffer).
func makeKey(tier, session string) string {
	var b strings.Builder
	b.Grow(1 + len(tier) + len(session))
	b.WriteByte(byte(len(tier)))
	b.WriteString(tier)
	b.WriteString(session)
	return b.String()
}

// keyIs reports whether key is the binding key of (tier, session), without building it.
// The tier is compared only when not empty (one call of the runtime's compare fewer for the
// default tier).
func keyIs(key, tier, session string) bool {
	return len(key) == 1+len(tier)+len(session) && key[0] == byte(len(tier)) &&
		key[1+len(tier):] == session && (len(tier) == 0 || key[1:1+len(tier)] == tier)
}

// tierOf recovers the tier from a key (a substring: no allocation).
func tierOf(key string) string { return key[1 : 1+int(key[0])] }

// sessionOf recovers the session ID from a key (a substring: no allocation).
func sessionOf(key string) string { return key[1+int(key[0]):] }
