package affinity

import (
	"slices"
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
// list of its backend in the shard (bprev is pendLink while the binding waits in
// shard.pend to be linked there). A free entry's next links the free list. Entry 0 is
// never a binding: flush writes its bprev (the old head's, when there is none).
type entry struct {
	key          string // len(tier) byte + tier + session ID; owned (one allocation)
	lastUse      int64  // nanoseconds since the table's clock base
	prev, next   uint32 // LRU list of class (front = most recent)
	bprev, bnext uint32 // list of the backend (shard.bk[slot])
	slot         uint32 // the backend's number (Table.reg): index into shard.bk and shard.slots
	class        uint8  // TTL class (index into Table.ttls)
	lflags       uint8  // load-awareness state (usage.go) and flagProvisional (store_confirm.go)
	lprompt      uint16 // last reported prompt tokens, in units of 64 (see usage.go)
}

type lruList struct{ head, tail uint32 }

// bkList is the list of a backend's bindings in one shard: its first entry and its
// length (pending bindings excluded: see shard.pend).
type bkList struct{ head, count uint32 }

// backendSlot is what the hit path keeps per backend in one shard, indexed by the
// backend's table-wide number (entry.slot): its interned ID and its hrw node hash premixed
// as each Backend carries it (for fast candidate matching), both filled by the first
// hit (shard.fill: a miss never touches the slot; zero until then); hint and
// hintID remember where a hit last found this backend among the caller's candidates (the
// index and that candidate's ID string, whose bytes are usually those of every later
// call's candidate) so that the next hit can confirm it without a search (findSlot).
// hstate and hver cache the backend's health state for the hit (Scheduler.slotState).
// Zeroed when the shard's last binding to the backend goes (the number may be reused).
type backendSlot struct {
	id     string
	hintID string // a candidate's ID equal to id (the caller's string: short, pinned)
	pre    uint64 // premix(hrw.NodeHash(id)), Backend.pre
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
	// reads stay shared. What only a miss reads or writes comes last.
	//
	// Per backend, indexed by its number in the table's registry (Table.reg), the shard
	// keeps the hit's slot (slots, filled by the first hit), its bindings list (bk) and a
	// bit (held) that is set while it has bindings to the backend, that is while it holds
	// the registry's entry (regEnt.acquire). A miss reads only the registry and held; it
	// appends its binding to pend, and every pendMax misses flush links the batch into the
	// backends' lists at once, so that the lines those links touch (cold when there are
	// many backends) are loaded together rather than one per miss.
	mu      sync.Mutex
	listBuf [listInline]lruList // lists' storage for up to listInline TTL classes
	c       counters
	idx     index
	chunks  []*[chunkSize]entry
	lists   []lruList       // one per TTL class; each sorted by lastUse, newest first
	slots   []backendSlot   // by backend number (Table.reg): the hit's per-backend caches
	bk      []bkList        // by backend number: the backend's bindings list in this shard
	held    []uint64        // bit n: the shard holds backend n (has bindings to it)
	reg     *backendReg     // the table's
	pend    [pendMax]uint32 // new bindings not yet in their backend's list (flush)
	npend   uint32
	sink    uint32 // a sum of what flush loads ahead, so that those loads are kept
	free    uint32 // free-list head
	next    uint32 // next never-used index (starts at 1: index 0 means none)
	n       int    // live bindings
	cap     int
	_       [4]byte // size 384, a multiple of 64: shards start on their own lines
}

// pendMax is how many new bindings a shard links into their backends' lists at a time.
const pendMax = 16

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

// number returns the number of backend id (premixed node hash pre) in the table's
// registry, the shard holding it (taking its reference when it held none). Reads only
// the registry and the shard's held bits: no per-backend line of the shard.
func (sh *shard) number(id string, pre uint64) uint32 {
	e, n := sh.reg.lookup(id, pre)
	for {
		w, bit := n>>6, uint64(1)<<(n&63)
		if int(w) < len(sh.held) && sh.held[w]&bit != 0 {
			if e.held() {
				return n
			}
		} else if e.acquire() {
			if int(w) >= len(sh.held) {
				sh.held = append(sh.held, make([]uint64, (sh.reg.size()+63)/64-len(sh.held))...)
			}
			sh.held[w] |= bit // the slot is left to the first hit (fill)
			return n
		}
		e, n = sh.reg.add(id, pre) // e was freed meanwhile
	}
}

// fill makes slot n (of a backend the shard holds) ready for the hit path: its ID and
// hash, which number leaves to the first hit (a miss does not touch the slot).
func (sh *shard) fill(n uint32) *backendSlot {
	if int(n) >= len(sh.slots) {
		sh.slots = append(sh.slots, make([]backendSlot, sh.reg.size()-len(sh.slots))...)
	}
	s := &sh.slots[n]
	if s.pre == 0 {
		e := sh.reg.entry(n)
		s.id, s.pre = e.id, e.pre
	}
	return s
}

// idOf returns the ID of backend n, which the shard holds.
func (sh *shard) idOf(n uint32) string {
	if int(n) < len(sh.slots) && sh.slots[n].pre != 0 {
		return sh.slots[n].id
	}
	return sh.reg.entry(n).id
}

// pendLink marks an entry (bprev) not yet linked into its backend's list: it is in
// shard.pend.
const pendLink = ^uint32(0)

// flush links the pending bindings (shard.pend, oldest first) into their backends'
// lists: a batch whose lines (each backend's list head, the previous head entry) are
// mostly cold, loaded in one loop so that their misses overlap.
func (sh *shard) flush() {
	if sh.npend == 0 {
		return
	}
	if n := sh.reg.size(); len(sh.bk) < n {
		sh.bk = append(sh.bk, make([]bkList, n-len(sh.bk))...)
	}
	pend := sh.pend[:sh.npend]
	var touch uint32 // loads of the lines the links need, not waited on
	for _, i := range pend {
		touch += sh.at(sh.bk[sh.at(i).slot].head).bprev
	}
	sh.sink = touch
	for _, i := range pend { // entry 0 (none) takes the old head's bprev: no branch
		e := sh.at(i)
		b := &sh.bk[e.slot]
		e.bprev, e.bnext = 0, b.head
		sh.at(b.head).bprev = i
		b.head = i
		b.count++
	}
	sh.npend = 0
}

// insert stores a new binding to backend id (premixed node hash pre; the key must be
// absent), first reclaiming a few expired bindings and, at the cap, evicting the shard's
// least-recently-used one (returned). fl is the new entry's lflags: 0, or
// flagProvisional for a binding a Scheduler with a store decided without it.
func (sh *shard) insert(t *Table, h uint32, tier, session string, cls uint8, id string, pre uint64, now int64, fl uint8) (evictedTier string, evicted bool) {
	sh.reclaim(t, now, reclaimPerInsert)
	if sh.n >= sh.cap {
		if v := sh.lru(); v != 0 {
			evictedTier = tierOf(sh.at(v).key)
			sh.remove(v)
			sh.c.evictions++
			evicted = true
		}
	}
	si := sh.number(id, pre)
	i := sh.alloc()
	e := sh.at(i)
	e.key = makeKey(tier, session) // the miss path's one allocation
	e.class = cls
	e.slot = si
	e.lflags = fl
	l := &sh.lists[cls]
	if l.head != 0 {
		if h := sh.at(l.head).lastUse; h > now {
			now = h
		}
	}
	e.lastUse = now
	sh.pushFront(l, i, e)
	e.bprev, e.bnext = pendLink, 0 // linked by flush
	sh.pend[sh.npend] = i
	if sh.npend++; int(sh.npend) == len(sh.pend) {
		sh.flush()
	}
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
	n := e.slot
	if e.bprev == pendLink {
		k := slices.Index(sh.pend[:sh.npend], i)
		copy(sh.pend[k:sh.npend], sh.pend[k+1:sh.npend])
		sh.npend--
	} else {
		s := &sh.bk[n]
		if e.bprev != 0 {
			sh.at(e.bprev).bnext = e.bnext
		} else {
			s.head = e.bnext
		}
		if e.bnext != 0 {
			sh.at(e.bnext).bprev = e.bprev
		}
		s.count--
	}
	if (int(n) >= len(sh.bk) || sh.bk[n].count == 0) && !sh.pending(n) { // the last binding to n
		sh.held[n>>6] &^= 1 << (n & 63)
		if int(n) < len(sh.slots) {
			sh.slots[n] = backendSlot{}
		}
		sh.reg.entry(n).release()
	}
	*e = entry{next: sh.free}
	sh.free = i
	sh.n--
}

// holds reports whether the shard has bindings to backend n.
func (sh *shard) holds(n uint32) bool {
	return int(n>>6) < len(sh.held) && sh.held[n>>6]&(1<<(n&63)) != 0
}

// pending reports whether a pending binding is bound to backend n.
func (sh *shard) pending(n uint32) bool {
	for _, i := range sh.pend[:sh.npend] {
		if sh.at(i).slot == n {
			return true
		}
	}
	return false
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
