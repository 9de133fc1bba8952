package affinity

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// BackendLoad is a backend's own report of its queue, for [Scheduler.ReportLoad]: the
// vLLM gauges vllm:num_requests_waiting, vllm:num_requests_running and
// vllm:kv_cache_usage_perc (or their peers' equivalents).
type BackendLoad struct {
	Waiting int64   // requests queued, not yet scheduled
	Running int64   // requests being processed
	KVCache float64 // KV-cache usage in [0, 1] (reported back in LoadStats; not used to decide)
}

// backendLoad is the outstanding load of one backend: leases not yet Done and their
// cost, packed into one atomic word (one atomic add per Acquire and per Done), and the
// backend's last report. One per backend ID ever seen.
type backendLoad struct {
	id       string
	acc      atomic.Int64 // in-flight leases << costBits | their cost (prompt tokens)
	reported atomic.Int64 // Waiting + Running of the last ReportLoad
	beyond   atomic.Int64 // of those, the requests beyond the leases open here at that moment
	kvMilli  atomic.Int64 // KVCache x 1000 of the last ReportLoad
	dr       drainState   // the drain model (drainmodel.go)
}

// The packing of backendLoad.acc: the low costBits bits hold the summed cost, the rest
// the lease count. A lease's charge is at most MaxLeaseCost, so the sum cannot reach
// 2^costBits below 65,536 leases at the maximum each.
const (
	costBits = 40
	costMask = 1<<costBits - 1
)

// MaxLeaseCost is the largest cost a lease is charged, in prompt tokens (2^24, beyond any
// context window); Acquire clamps larger costs to it.
const MaxLeaseCost = 1 << 24

func (b *backendLoad) add(charge int64) { b.acc.Add(1<<costBits + charge) }

// sub releases a lease's charge. In correct use acc never goes negative (each lease's add
// happens before its sub); a release that takes it below zero is one too many (a copied
// Lease's second Done: misuse go vet reports) and is undone, so that misuse can leave the
// backend looking less loaded than it is for a while, never full (a wrapped count) for
// good.
func (b *backendLoad) sub(charge int64) {
	if b.acc.Add(-(1<<costBits + charge)) < 0 {
		b.acc.Add(1<<costBits + charge)
	}
}

// counts returns the in-flight leases and their cost.
func (b *backendLoad) counts() (requests, cost int64) {
	v := b.acc.Load()
	if v < 1<<costBits { // no lease open (below 0 only between an extra release and its undo)
		return 0, 0
	}
	return v >> costBits, v & costMask
}

// view returns the backend's load in prompt tokens as the placement rules see it at now:
// the cost leased here (with the drain model on, at most the work not yet drained), at
// least min_request_cost per lease open here, plus queuedCost for each reported request
// that was beyond the leases open here when it was reported, at most MaxLoadView.
func (b *backendLoad) view(p *loadParams, now int64) int64 {
	n, l := b.counts()
	if p.drainRate > 0 && n > 0 {
		l = b.remaining(p, now, n, l)
	}
	// The floor (rule 14e): n < 2^24 leases x at most 2^24 tokens fits an int64; 0 when off.
	return b.withReported(p, max(l, n*p.minCost))
}

// wait returns the backend's wait at now, the spill guard's measure of the queued work a
// request sent there would sit behind (rules 14a, 14e and 17): the cost leased here (with
// the drain model on, the part of it not yet drained, never more) plus the reported
// requests beyond the leases; view without min_request_cost's floor and without the
// drain model's per-request time. An open lease whose prefill is cached or drained holds
// a running slot, which the bound counts, but delays a new prefill far less than queued
// prefill does, which is what the guard weighs against the prefix a move throws away: a
// request decoding in a batch slot does not hold back a new request's prefill. It equals
// view when both the floor and the drain model are off.
func (b *backendLoad) wait(p *loadParams, now int64) int64 {
	n, l := b.counts()
	if p.drainRate > 0 && n > 0 {
		l = b.undrained(p, now, l)
	}
	return b.withReported(p, l)
}

// guardStays is the spill guard's first test on the backend a binding (or a parent hint)
// points at, for a guard reprefill of grp prompt tokens: true when the binding stays
// without looking at other candidates. With grp > 0 that is when the backend's wait is at
// most spill_cost_weight x grp (the move needs wait(bound) - wait(target) > that, and
// wait(target) >= 0); with grp 0 (nothing to lose: rule 18) only when the backend is
// idle, its load (floor and per-request time counted) 0, since such a binding is then
// placed by load alone. Without the floor and the drain model this is view == 0 ||
// view <= spill_cost_weight x grp, as before rule 14e's guard change. O(1): the
// record's atomics, in one call (view and wait written out: this is on every hit's path).
func (b *backendLoad) guardStays(p *loadParams, now, grp int64) bool {
	n, l := b.counts()
	if grp == 0 {
		if p.drainRate > 0 && n > 0 {
			l = b.remaining(p, now, n, l)
		}
		return b.withReported(p, max(l, n*p.minCost)) == 0 // view
	}
	if p.drainRate > 0 && n > 0 {
		l = b.undrained(p, now, l)
	}
	return float64(b.withReported(p, l)) <= p.weight*float64(grp) // wait
}

// sumView is view without the drain model (the lease-sum view, rules 14 and 14e), for
// the placement loops that handle the drain model apart; m is p.minCost, which they read
// once. Small enough to inline.
func (b *backendLoad) sumView(p *loadParams, m int64) int64 {
	n, l := b.counts()
	return b.withReported(p, max(l, n*m))
}

// withReported is view's last step: l (the cost of the leases open here) plus the
// reported requests beyond them, at most MaxLoadView. Small enough to inline.
func (b *backendLoad) withReported(p *loadParams, l int64) int64 {
	if ex := b.beyond.Load(); ex > 0 {
		if ex > p.maxQueued { // saturate: a huge report is busy, never idle
			return MaxLoadView
		}
		l += ex * p.queuedCost // at most 2^46 + l: no overflow
	}
	return min(l, MaxLoadView)
}

// loadTable maps backend IDs (by their hrw node hash, already well mixed) to their load:
// an open-addressing index (linear probing, at most half full) whose slots are written
// once, in place, under mu, and read without a lock: a new backend's load is stored in its
// slot before the slot's key, so a reader that sees the key sees the load. When an insert
// would make the index more than half full, a copy twice the size replaces it (published
// through idx; readers of the old one still find every backend it held). Inserting n
// backends costs O(n) amortized (before, every first sight copied the whole index:
// O(n²), 2 s for the first Acquire over 8,000 new candidates). Entries are never removed:
// memory is O(distinct backend IDs ever seen), about 235-245 bytes of live heap per ID
// with 10-byte IDs, record, index share and ID string together (BenchmarkLoadRecordBytes:
// 23 MB per 100,000 IDs).
type loadTable struct {
	idx atomic.Pointer[loadIndex]
	mu  sync.Mutex // serializes writers
}

type loadIndex struct {
	keys []atomic.Uint64 // node hash, 0 = empty (a real ID never hashes to 0 here: see slotHash)
	vals []atomic.Pointer[backendLoad]
	n    int // slots in use; written under loadTable.mu only
}

// slotHash maps a node hash to a non-zero key.
func slotHash(h uint64) uint64 { return h | 1<<63 }

func (x *loadIndex) find(id string, h uint64) *backendLoad {
	if x == nil {
		return nil
	}
	mask := uint64(len(x.keys) - 1)
	for p := h & mask; ; p = (p + 1) & mask {
		switch x.keys[p].Load() {
		case 0:
			return nil
		case h:
			// The same Backend values are passed on every call: their ID strings share
			// the stored one's bytes, so the pointer test usually settles it.
			if v := x.vals[p].Load(); len(v.id) == len(id) && (unsafe.StringData(v.id) == unsafe.StringData(id) || v.id == id) {
				return v
			}
		}
	}
}

// put stores b under key h in a free slot: the value first, then the key (see
// loadTable). The caller holds loadTable.mu and has made room (n+1 <= half the slots).
func (x *loadIndex) put(h uint64, b *backendLoad) {
	mask := uint64(len(x.keys) - 1)
	p := h & mask
	for x.keys[p].Load() != 0 {
		p = (p + 1) & mask
	}
	x.vals[p].Store(b)
	x.keys[p].Store(h)
	x.n++
}

// get returns the load of the backend (id, node hash), creating it on first sight. 0
// allocs for a known backend.
func (t *loadTable) get(id string, hash uint64) *backendLoad {
	h := slotHash(hash)
	if b := t.idx.Load().find(id, h); b != nil {
		return b
	}
	return t.add(id, h)
}

func (t *loadTable) lookup(id string) *backendLoad {
	return t.idx.Load().find(id, slotHash(hashID(id)))
}

func (t *loadTable) add(id string, h uint64) *backendLoad {
	t.mu.Lock()
	defer t.mu.Unlock()
	x := t.idx.Load()
	if b := x.find(id, h); b != nil {
		return b
	}
	if x == nil || 2*(x.n+1) > len(x.keys) {
		size := 16
		if x != nil {
			size = 2 * len(x.keys)
		}
		grown := &loadIndex{keys: make([]atomic.Uint64, size), vals: make([]atomic.Pointer[backendLoad], size)}
		if x != nil {
			for p := range x.keys {
				if k := x.keys[p].Load(); k != 0 {
					grown.put(k, x.vals[p].Load())
				}
			}
		}
		t.idx.Store(grown) // complete before it is published: readers see every backend
		x = grown
	}
	// Not cloned: the ID of a Backend is its caller's string, and keeping that very
	// string lets later lookups compare pointers (IDs are short; pinning is harmless).
	b := &backendLoad{id: id}
	x.put(h, b)
	return b
}

// LoadSnapshot is one backend's outstanding load as [Scheduler.Load] sees it.
type LoadSnapshot struct {
	Requests int64   // leases acquired and not yet Done
	Cost     int64   // their charges in prompt tokens (each at least 1; without load.min_request_cost's floor)
	Reported int64   // Waiting + Running of the last ReportLoad (0 if none)
	KVCache  float64 // KV-cache usage of the last ReportLoad
}

// Load returns the outstanding load of backendID (zero for a backend never leased or
// reported). Lock-free, 0 allocs. Safe for concurrent use.
func (s *Scheduler) Load(backendID string) LoadSnapshot {
	var out LoadSnapshot
	if b := s.ld.loads.lookup(backendID); b != nil {
		out.Requests, out.Cost = b.counts()
		out.Reported = b.reported.Load()
		out.KVCache = float64(b.kvMilli.Load()) / 1000
	}
	return out
}

// ReportLoad records backendID's own report of its queue (for example scraped from
// vLLM's /metrics), replacing the previous one; BackendLoad{} clears it. With load
// awareness on, the Waiting + Running requests beyond the leases of this Scheduler open at
// the time of the call (other replicas' requests, say) count queued_request_cost prompt
// tokens each in the backend's load until the next report (see the package
// documentation, "Load awareness"). Decision: the leases are counted when the report
// arrives, not when the load is read, so a lease that ends after a scrape that saw it
// running does not linger as a phantom queued request until the next scrape, and leases
// opened after it do not hide the others' requests. Negative counts are ErrInvalidLoad, as is an empty ID
// or a KVCache outside [0, 1]. Counts of any size are accepted: their sum saturates at
// math.MaxInt64 and the load they add at MaxLoadView (a huge queue looks busy, never
// idle). Lock-free after the backend's first sight; 0 allocs.
func (s *Scheduler) ReportLoad(backendID string, l BackendLoad) error {
	switch {
	case backendID == "":
		return fmt.Errorf("%w: empty backend ID", ErrInvalidLoad)
	case l.Waiting < 0 || l.Running < 0:
		return fmt.Errorf("%w: %s: waiting %d, running %d", ErrInvalidLoad, errTrunc(backendID), l.Waiting, l.Running)
	case !finite(l.KVCache) || l.KVCache < 0 || l.KVCache > 1:
		return fmt.Errorf("%w: %s: kv cache usage %v not in [0, 1]", ErrInvalidLoad, errTrunc(backendID), l.KVCache)
	}
	b := s.ld.loads.lookup(backendID)
	if b == nil { // first sight: keep a copy, the caller's string may be part of a buffer
		id := strings.Clone(backendID)
		b = s.ld.loads.get(id, hashID(id))
	}
	rep := l.Waiting + min(l.Running, math.MaxInt64-l.Waiting) // saturating sum
	n, _ := b.counts()
	b.reported.Store(rep)
	b.beyond.Store(max(rep-n, 0))
	b.kvMilli.Store(int64(math.Round(l.KVCache * 1000)))
	return nil
}
