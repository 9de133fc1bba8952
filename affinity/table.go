package affinity

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

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

// backendSlot is a backend known to one shard: its interned ID, the hrw node hash (for
// fast candidate matching) and the head of its bindings list. Freed at count 0. hint and
// hintID remember where a hit last found this backend among the caller's candidates (the
// index and that candidate's ID string, whose bytes are usually those of every later
// call's candidate) so that the next hit can confirm it without a search (findSlot).
type backendSlot struct {
	id     string
	hintID string // a candidate's ID equal to id (the caller's string: short, pinned)
	hash   uint64
	head   uint32
	count  uint32
	hint   uint32
	bl     *backendLoad // the backend's load record (Scheduler leases), cached; nil until used
}

// counters are plain integers guarded by the shard lock; Stats sums them.
type counters struct {
	hits, misses, evictions, expired uint64
	parentPlaced                     uint64 // misses placed on the parent's backend
	broken                           [metrics.NumReasons + 1]uint64
}

type shard struct {
	// What a hit touches comes first and fills two cache lines: the lock, the index and
	// the chunk table in the first; the LRU lists, the backend slots and the counters
	// (hits first) in the second.
	mu       sync.Mutex
	idx      index
	chunks   []*[chunkSize]entry
	lists    []lruList // one per TTL class; each sorted by lastUse, newest first
	slots    []backendSlot
	c        counters
	free     uint32 // free-list head
	next     uint32 // next never-used index (starts at 1: index 0 means none)
	n        int    // live bindings
	cap      int
	slotFree []uint32
	slotByID map[string]uint32
	_        [24]byte // size 256, a multiple of 64: shards start on their own lines
}

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

func (sh *shard) slotFor(id string, hash uint64) uint32 {
	if si, ok := sh.slotByID[id]; ok {
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
	sh.slots[si] = backendSlot{id: id, hash: hash}
	sh.slotByID[id] = si
	return si
}

// insert stores a new binding (the key must be absent), first reclaiming a few expired
// bindings and, at the cap, evicting the shard's least-recently-used one (returned).
func (sh *shard) insert(t *Table, h uint32, tier, session string, cls uint8, id string, hash uint64, now int64) (evictedTier string, evicted bool) {
	sh.reclaim(t, now, reclaimPerInsert)
	if sh.n >= sh.cap {
		if v := sh.lru(); v != 0 {
			evictedTier = tierOf(sh.at(v).key)
			sh.remove(v)
			sh.c.evictions++
			evicted = true
		}
	}
	si := sh.slotFor(id, hash)
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
	e := sh.at(i)
	sh.idx.del(uint32(hrw.KeyHash(sessionOf(e.key))), i)
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
		delete(sh.slotByID, s.id)
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
func keyIs(key, tier, session string) bool {
	return len(key) == 1+len(tier)+len(session) && key[0] == byte(len(tier)) &&
		key[1:1+len(tier)] == tier && key[1+len(tier):] == session
}

// tierOf recovers the tier from a key (a substring: no allocation).
func tierOf(key string) string { return key[1 : 1+int(key[0])] }

// sessionOf recovers the session ID from a key (a substring: no allocation).
func sessionOf(key string) string { return key[1+int(key[0]):] }

// Table is the sharded sticky-binding table under a [Scheduler]: it maps (tier, session
// ID) to a backend ID with a sliding TTL, an LRU cap and a reverse index backend ->
// bindings. It knows nothing of candidates, health or HRW; use it on its own to build a
// different scheduler, or through a Scheduler.
//
// Layout: 64 shards (fewer when the cap is below 1,024), chosen by the top bits of
// hrw.KeyHash(sessionID), each under its own mutex with an open-addressing index (8-byte
// slots: the low 32 bits of that hash and an entry number) into a chunked slab of 48-byte
// entries, one LRU list per distinct TTL and one list per bound
// backend (intrusive, uint32 links). Measured ≈ 120 heap bytes per binding with 36-byte
// session IDs, key included (see the B/binding benchmark). Memory stays at its high-water
// mark (bounded by the cap): freed entries are reused, chunks and index are not shrunk.
//
// The cap: MaxBindings is split over the shards (their caps sum to exactly MaxBindings),
// and a full shard evicts its own least-recently-used binding. LRU order is thus exact per
// shard and approximate across shards.
//
// Expiry: a binding is expired when now >= lastUse + TTL(tier). Expired bindings are
// invisible at once and are reclaimed (counted in Stats.Expired, not as evictions) when
// a Scheduler's SelectBackend rebinds their key, a few per insert (amortized), by
// DeleteBackend, and all at once by Sweep. Get and Touch skip them without removing them;
// Bind and Delete remove them without counting.
//
// All methods are safe for concurrent use. Table methods count only evictions and
// expirations; hits, misses and broken bindings are counted by the Scheduler.
type Table struct {
	shards     []shard
	shift      uint    // shard = keyHash >> shift
	ttls       []int64 // per TTL class, nanoseconds, > 0
	defClass   int     // class of tiers without override; -1: affinity disabled
	tierClass  map[string]int
	maxSession int
	clock      clockReader
	rec        metrics.Recorder
}

// NewTable validates cfg (see [Config]) and returns an empty table; errors wrap
// ErrInvalidConfig and name the field. Of the options only WithClock and WithRecorder
// (Evicted events) apply; nil options are ignored. Cost: O(shards) small allocations.
func NewTable(cfg Config, opts ...Option) (*Table, error) {
	r, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	return newTable(r, collect(opts)), nil
}

func collect(opts []Option) options {
	var o options
	for _, op := range opts {
		if op != nil {
			op.apply(&o)
		}
	}
	if o.rec == nil {
		o.rec = metrics.Noop{}
	}
	return o
}

func newTable(r resolved, o options) *Table {
	t := &Table{defClass: -1, maxSession: r.maxSession, clock: newClockReader(o.clock), rec: o.rec}
	// TTL classes: the distinct non-zero TTLs, ascending (deterministic).
	var ds []time.Duration
	if r.defTTL > 0 {
		ds = append(ds, r.defTTL)
	}
	for _, d := range r.tierTTL {
		if d > 0 && !slices.Contains(ds, d) {
			ds = append(ds, d)
		}
	}
	slices.Sort(ds)
	for _, d := range ds {
		t.ttls = append(t.ttls, int64(d))
	}
	class := func(d time.Duration) int {
		if d == 0 {
			return -1
		}
		return slices.Index(ds, d)
	}
	t.defClass = class(r.defTTL)
	if len(r.tierTTL) > 0 {
		t.tierClass = make(map[string]int, len(r.tierTTL))
		for name, d := range r.tierTTL {
			t.tierClass[name] = class(d)
		}
	}
	n, bits := maxShards, uint(6)
	for n > 1 && r.maxBindings/n < minPerShard {
		n, bits = n/2, bits-1
	}
	t.shift = 64 - bits
	t.shards = make([]shard, n)
	base, rem := r.maxBindings/n, r.maxBindings%n
	for i := range t.shards {
		sh := &t.shards[i]
		sh.cap = base
		if i < rem {
			sh.cap++
		}
		sh.next = 1
		sh.slotByID = make(map[string]uint32)
		sh.lists = make([]lruList, len(t.ttls))
	}
	return t
}

// classOf returns the TTL class of tier, or ok=false when affinity is disabled for it.
func (t *Table) classOf(tier string) (cls uint8, ok bool) {
	c := t.defClass
	if t.tierClass != nil {
		if tc, found := t.tierClass[tier]; found {
			c = tc
		}
	}
	return uint8(c), c >= 0
}

// TTL returns the sticky TTL of tier (0: affinity disabled for it).
func (t *Table) TTL(tier string) time.Duration {
	c, ok := t.classOf(tier)
	if !ok {
		return 0
	}
	return time.Duration(t.ttls[c])
}

func (t *Table) shardFor(keyHash uint64) *shard { return &t.shards[keyHash>>t.shift] }

func (t *Table) checkKey(sessionID, tier string) error {
	switch {
	case sessionID == "":
		return ErrEmptySessionID
	case len(sessionID) > t.maxSession:
		return fmt.Errorf("%w: %d bytes (max %d): %s", ErrSessionIDTooLong, len(sessionID), t.maxSession, errTrunc(sessionID))
	case len(tier) > MaxTierBytes:
		return fmt.Errorf("%w: %d bytes (max %d): %s", ErrTierTooLong, len(tier), MaxTierBytes, errTrunc(tier))
	}
	return nil
}

// Get returns the backend ID bound to (sessionID, tier) if the binding exists and has not
// expired. It never extends the TTL, counts nothing and leaves an expired binding in
// place. Invalid arguments give ok=false. Cost: one xxh3 hash of sessionID, one clock
// read, one shard lock, one index probe; 0 allocs.
func (t *Table) Get(sessionID, tier string) (backendID string, ok bool) {
	return t.get(sessionID, tier, false)
}

// Touch is Get that also extends a valid binding's TTL (lastUse = now): what a hit does.
// Same cost as [Table.Get].
func (t *Table) Touch(sessionID, tier string) (backendID string, ok bool) {
	return t.get(sessionID, tier, true)
}

func (t *Table) get(sessionID, tier string, touch bool) (string, bool) {
	if t.checkKey(sessionID, tier) != nil {
		return "", false
	}
	kh := hrw.KeyHash(sessionID)
	sh := t.shardFor(kh)
	now := t.clock.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.idx.find(sh, uint32(kh), tier, sessionID)
	if i == 0 {
		return "", false
	}
	e := sh.at(i)
	if now-e.lastUse >= t.ttls[e.class] {
		return "", false
	}
	if touch {
		sh.touch(i, e, now)
	}
	return sh.slots[e.slot].id, true
}

// Bind binds (sessionID, tier) to backendID with lastUse = now, replacing any binding of
// that key (the replaced binding is not counted). For a tier whose TTL is 0 it stores
// nothing and returns nil. Errors: ErrEmptySessionID, ErrSessionIDTooLong, ErrTierTooLong,
// ErrInvalidBackend (empty backendID). Cost: O(1) amortized; one allocation (the key)
// for every binding stored, new or replacing, plus amortized slab/index growth and a copy
// of backendID when it is new to the shard; hashes sessionID and backendID. At the cap it
// evicts (and reports to the Recorder) one binding.
func (t *Table) Bind(sessionID, tier, backendID string) error {
	if err := t.checkKey(sessionID, tier); err != nil {
		return err
	}
	if backendID == "" {
		return fmt.Errorf("%w: empty ID", ErrInvalidBackend)
	}
	cls, ok := t.classOf(tier)
	if !ok {
		return nil
	}
	kh := hrw.KeyHash(sessionID)
	sh := t.shardFor(kh)
	now := t.clock.now()
	sh.mu.Lock()
	if i := sh.idx.find(sh, uint32(kh), tier, sessionID); i != 0 {
		sh.remove(i)
	}
	evTier, ev := sh.insert(t, uint32(kh), tier, sessionID, cls, backendID, hrw.NodeHash(backendID), now)
	sh.mu.Unlock()
	if ev {
		t.rec.Evicted(evTier)
	}
	return nil
}

// Delete removes the binding of (sessionID, tier), expired or not, and reports whether
// one was there. Counts nothing. Cost: one lock, 0 allocs.
func (t *Table) Delete(sessionID, tier string) bool {
	if t.checkKey(sessionID, tier) != nil {
		return false
	}
	kh := hrw.KeyHash(sessionID)
	sh := t.shardFor(kh)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.idx.find(sh, uint32(kh), tier, sessionID)
	if i != 0 {
		sh.remove(i)
	}
	return i != 0
}

// DeleteBackend removes every binding to backendID and returns how many were still
// valid (expired ones are removed too and counted as expired). Counts no broken bindings
// (Scheduler.OnBackendDown does). Cost: O(bindings to backendID + shards); each shard is
// locked only while its own bindings to backendID are removed.
func (t *Table) DeleteBackend(backendID string) int {
	n, _ := t.deleteBackend(backendID, 0)
	return n
}

// tierTally aggregates per-tier counts while a lock is held, to report them after.
type tierTally struct {
	list []tierCount
	last int
}

type tierCount struct {
	tier string
	n    int
}

func (tt *tierTally) add(tier string) {
	if tt.last < len(tt.list) && tt.list[tt.last].tier == tier {
		tt.list[tt.last].n++
		return
	}
	for i := range tt.list {
		if tt.list[i].tier == tier {
			tt.list[i].n++
			tt.last = i
			return
		}
	}
	tt.last = len(tt.list)
	tt.list = append(tt.list, tierCount{tier: tier, n: 1})
}

// deleteBackend removes every binding to id, counting valid ones as broken{reason} when
// reason != 0, and returns the count and the per-tier tally.
func (t *Table) deleteBackend(id string, reason metrics.Reason) (int, tierTally) {
	var tally tierTally
	total := 0
	now := t.clock.now()
	for s := range t.shards {
		sh := &t.shards[s]
		sh.mu.Lock()
		si, ok := sh.slotByID[id]
		if !ok {
			sh.mu.Unlock()
			continue
		}
		valid, expired := 0, 0
		for i := sh.slots[si].head; i != 0; {
			e := sh.at(i)
			next := e.bnext
			if now-e.lastUse >= t.ttls[e.class] {
				expired++
			} else {
				valid++
				if reason != 0 {
					tally.add(tierOf(e.key))
				}
			}
			sh.remove(i) // may free the slot; we already hold next
			i = next
		}
		sh.c.expired += uint64(expired)
		sh.c.broken[reason] += uint64(valid)
		sh.mu.Unlock()
		total += valid
	}
	return total, tally
}

// Sweep reclaims every expired binding now and returns how many it removed (also counted
// in Stats.Expired). Call it periodically (every minute, say) if sessions may stop
// without traffic replacing them; without it, expired bindings are still invisible and
// are reclaimed a few per insert or by eviction at the cap. Cost: O(expired + shards x
// distinct TTLs); each shard is locked in turn.
func (t *Table) Sweep() int {
	now := t.clock.now()
	n := 0
	for s := range t.shards {
		sh := &t.shards[s]
		sh.mu.Lock()
		n += sh.reclaim(t, now, -1)
		sh.mu.Unlock()
	}
	return n
}

// Len returns the number of stored bindings, including expired ones not yet reclaimed.
// Cost: O(shards) locks, 0 allocs.
func (t *Table) Len() int {
	n := 0
	for s := range t.shards {
		sh := &t.shards[s]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// Stats returns a snapshot of the counters. Each shard is read under its lock, so the
// sum is consistent per shard, not across shards. Cost: O(shards) locks, 0 allocs.
func (t *Table) Stats() Stats {
	var st Stats
	for s := range t.shards {
		sh := &t.shards[s]
		sh.mu.Lock()
		c := sh.c
		n := sh.n
		sh.mu.Unlock()
		st.Hits += c.hits
		st.Misses += c.misses
		st.Evictions += c.evictions
		st.Expired += c.expired
		st.ParentPlaced += c.parentPlaced
		st.Broken.Down += c.broken[metrics.ReasonDown]
		st.Broken.Unhealthy += c.broken[metrics.ReasonUnhealthy]
		st.Broken.NotCandidate += c.broken[metrics.ReasonNotCandidate]
		st.Broken.Overloaded += c.broken[metrics.ReasonOverloaded]
		st.Bindings += n
	}
	return st
}

// Stats is a snapshot of a Scheduler's (or Table's) counters since construction.
type Stats struct {
	Hits      uint64      // SelectBackend calls that returned affinityHit = true
	Misses    uint64      // SelectBackend calls that returned affinityHit = false (no error)
	Broken    BrokenStats // bindings broken within their TTL, by reason
	Evictions uint64      // bindings evicted at the cap (LRU)
	// Expired counts expired bindings reclaimed: by the SelectBackend that rebinds the
	// key, by the amortized reclaim of inserts, by Sweep, and by OnBackendDown or
	// DeleteBackend. (Table.Bind and Table.Delete remove expired bindings uncounted.)
	Expired  uint64
	Bindings int // stored bindings, expired-but-not-reclaimed included
	// ParentPlaced counts the misses (included in Misses) that
	// Scheduler.SelectBackendWithParent placed on the parent session's backend.
	ParentPlaced uint64
}

// BrokenStats counts broken bindings by reason (see metrics.Reason).
type BrokenStats struct {
	Down         uint64 // removed by OnBackendDown
	Unhealthy    uint64 // found with its backend Down in the health set, still a candidate
	NotCandidate uint64 // found with its backend missing from the candidates
	Overloaded   uint64 // moved by a load-aware Acquire (a spill)
}

// Total returns Down + Unhealthy + NotCandidate + Overloaded.
func (b BrokenStats) Total() uint64 { return b.Down + b.Unhealthy + b.NotCandidate + b.Overloaded }

// HitRate returns Hits / (Hits + Misses), or 0 before any call.
func (s Stats) HitRate() float64 {
	if s.Hits+s.Misses == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Hits+s.Misses)
}
