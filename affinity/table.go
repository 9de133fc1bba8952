package affinity

import (
	"fmt"
	"slices"
	"time"

	"github.com/agentserve/sessionaffinity/hrw"
	"github.com/agentserve/sessionaffinity/metrics"
)

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
// expirations; hits, misses and broken bindings are counted by the Scheduler. Make one
// with [NewTable]: the zero Table and a nil *Table are not usable (some methods panic,
// the others refuse every key: Bind's ErrSessionIDTooLong then says "max 0").
type Table struct {
	shards    []shard
	shift     uint    // shard = keyHash >> shift
	ttls      []int64 // per TTL class, nanoseconds, > 0
	defClass  int     // class of tiers without override; -1: affinity disabled
	tierClass map[string]int
	// someDisabled: some tier's TTL is 0 (the default's or an override), so a call must
	// look its tier's class up before it locks a shard (a disabled tier locks none).
	someDisabled bool
	maxSession   int
	clock        clockReader
	rec          metrics.Recorder
	reg          backendReg // table-wide backend numbers
}

// NewTable validates cfg (see [Config]) and returns an empty table; errors wrap
// ErrInvalidConfig and name the field. Of the options only WithClock and WithRecorder
// (Evicted events) apply; nil options are ignored, and negative WithStoreTimeouts
// values are refused as by New. Cost: O(shards) small allocations.
func NewTable(cfg Config, opts ...Option) (*Table, error) {
	r, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	o := collect(opts)
	if err := validateStoreTimeouts(o); err != nil {
		return nil, err
	}
	return newTable(r, o), nil
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
	t.someDisabled = t.defClass < 0
	for _, c := range t.tierClass {
		t.someDisabled = t.someDisabled || c < 0
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
		sh.reg = &t.reg
		if len(t.ttls) <= listInline { // in the line the hit writes anyway (the lock's)
			sh.lists = sh.listBuf[:len(t.ttls)]
		} else { // at least a cache line, so that no two shards' heads share one
			sh.lists = make([]lruList, len(t.ttls), max(len(t.ttls), 8))
		}
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

// enabled reports whether tier's TTL is not 0 (classOf's ok).
func (t *Table) enabled(tier string) bool {
	_, ok := t.classOf(tier)
	return ok
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

// validKey reports whether checkKey(sessionID, tier) is nil; small enough to inline.
func (t *Table) validKey(sessionID, tier string) bool {
	return sessionID != "" && len(sessionID) <= t.maxSession && len(tier) <= MaxTierBytes
}

// checkKey returns nil for a valid key, else the error naming what is wrong.
func (t *Table) checkKey(sessionID, tier string) error {
	if t.validKey(sessionID, tier) {
		return nil
	}
	return t.keyError(sessionID, tier)
}

func (t *Table) keyError(sessionID, tier string) error {
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
	id, _, ok := t.get(sessionID, tier, false)
	return id, ok
}

// Touch is Get that also extends a valid binding's TTL (lastUse = now): what a hit does.
// Same cost as [Table.Get].
func (t *Table) Touch(sessionID, tier string) (backendID string, ok bool) {
	id, _, ok := t.get(sessionID, tier, true)
	return id, ok
}

// get returns the backend of the valid binding of (sessionID, tier) and a copy of its
// entry (as read, before a touch), sliding its TTL when touch is set, all under the
// shard's lock.
func (t *Table) get(sessionID, tier string, touch bool) (string, entry, bool) {
	sh, i, _, now, ok := t.lockKey(sessionID, tier)
	if !ok {
		return "", entry{}, false
	}
	defer sh.mu.Unlock()
	if i == 0 {
		return "", entry{}, false
	}
	e := sh.at(i)
	if now-e.lastUse >= t.ttls[e.class] {
		return "", entry{}, false
	}
	cp := *e
	if touch {
		sh.touch(i, e, now)
	}
	return sh.idOf(e.slot), cp, true
}

// lockKey is the start Get, Touch, Delete and deleteIf share: it checks the key, locks
// the shard of (sessionID, tier) and finds its entry i (0: none stored), also returning
// the key's hash and a clock reading taken before the lock. ok is false for an invalid
// key, and then nothing is locked; otherwise the caller unlocks sh.mu.
func (t *Table) lockKey(sessionID, tier string) (sh *shard, i uint32, kh uint64, now int64, ok bool) {
	if t.checkKey(sessionID, tier) != nil {
		return nil, 0, 0, 0, false
	}
	kh = hrw.KeyHash(sessionID)
	sh = t.shardFor(kh)
	now = t.clock.now()
	sh.mu.Lock()
	return sh, sh.idx.find(sh, uint32(kh), tier, sessionID), kh, now, true
}

// Bind binds (sessionID, tier) to backendID with lastUse = now, replacing any binding of
// that key (the replaced binding is not counted). For a tier whose TTL is 0 it stores
// nothing and returns nil. Errors (nothing stored, any binding of the key untouched):
// ErrEmptySessionID, ErrSessionIDTooLong, ErrTierTooLong, ErrInvalidBackend (backendID
// empty or over MaxBackendIDBytes, the limit NewBackend applies: a binding to an ID no
// Backend can carry could never be a hit, and no snapshot could hold it). Cost: O(1) amortized; one allocation (the key)
// for every binding stored, new or replacing, plus amortized slab/index growth, a copy
// of backendID when it is new to the table (its registry entry) and growth of the shard's
// per-backend arrays when a new backend number reaches them; hashes sessionID and
// backendID. At the cap it
// evicts (and reports to the Recorder) one binding.
func (t *Table) Bind(sessionID, tier, backendID string) error {
	if err := t.checkKey(sessionID, tier); err != nil {
		return err
	}
	if backendID == "" {
		return fmt.Errorf("%w: empty ID", ErrInvalidBackend)
	}
	if len(backendID) > MaxBackendIDBytes {
		return fmt.Errorf("%w: ID of %d bytes (max %d): %s", ErrInvalidBackend, len(backendID), MaxBackendIDBytes, errTrunc(backendID))
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
	evTier, ev := sh.insert(t, uint32(kh), tier, sessionID, cls, backendID, premix(hrw.NodeHash(backendID)), now, 0)
	sh.mu.Unlock()
	if ev {
		t.rec.Evicted(evTier)
	}
	return nil
}

// Delete removes the binding of (sessionID, tier), expired or not, and reports whether
// one was there. Counts nothing. Cost: one lock, 0 allocs.
func (t *Table) Delete(sessionID, tier string) bool {
	sh, i, _, _, ok := t.lockKey(sessionID, tier)
	if !ok {
		return false
	}
	defer sh.mu.Unlock()
	if i != 0 {
		sh.remove(i)
	}
	return i != 0
}

// deleteIf removes the valid (unexpired) binding of (sessionID, tier) if it names
// backendID, under the shard's lock, and reports whether it did (deleted), or that
// there is no valid binding of the key (absent: none stored, or an expired one). Invalid
// arguments (an empty backendID included) give neither.
func (t *Table) deleteIf(sessionID, tier, backendID string) (deleted, absent bool) {
	if backendID == "" {
		return false, false
	}
	sh, i, kh, now, ok := t.lockKey(sessionID, tier)
	if !ok {
		return false, false
	}
	defer sh.mu.Unlock()
	if i == 0 {
		return false, true
	}
	e := sh.at(i)
	if now-e.lastUse >= t.ttls[e.class] {
		return false, true
	}
	if sh.idOf(e.slot) != backendID {
		return false, false
	}
	sh.removeHashed(i, uint32(kh))
	return true, false
}

// DeleteBackend removes every binding to backendID and returns how many were still
// valid (expired ones are removed too and counted as expired). Counts no broken bindings
// (Scheduler.OnBackendDown does). Cost: O(bindings to backendID + shards); each shard is
// locked only while its own bindings to backendID are removed.
func (t *Table) DeleteBackend(backendID string) int {
	n, _ := t.deleteBackend(backendID, 0)
	return n
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
