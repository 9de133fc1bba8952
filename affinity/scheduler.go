package affinity

import (
	"fmt"
	"log/slog"
	"sync"
	"unsafe"

	"github.com/agentserve/sessionaffinity/health"
	"github.com/agentserve/sessionaffinity/hrw"
	"github.com/agentserve/sessionaffinity/metrics"
)

// Scheduler pins each (tier, session) to one backend: the first turn goes to the HRW
// winner among the eligible candidates, later turns return to the same backend while the
// binding is valid. It composes a [Table], a health.Set and a metrics.Recorder and meets
// the contract stated in the package documentation.
//
// All methods are safe for concurrent use. A Scheduler starts no goroutine and needs no
// Close. Make one with [New]: the zero Scheduler and a nil *Scheduler are not usable (their
// methods panic).
type Scheduler struct {
	t      *Table
	health *health.Set
	rec    metrics.Recorder
	log    *slog.Logger // nil: no logging
	nodes  sync.Pool    // *[]hrw.Node scratch for misses over more than pickInline candidates
	ld     *loadState   // leases and load awareness (lease.go)
	store  *storeState  // nil: no shared store (store.go)
}

// New validates cfg and returns a Scheduler. Errors wrap ErrInvalidConfig and name the
// field. Options: WithClock, WithRecorder, WithHealth, WithLogger, WithStore,
// WithStoreTimeouts. Cost: O(shards).
func New(cfg Config, opts ...Option) (*Scheduler, error) {
	r, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	o := collect(opts)
	if o.health == nil {
		o.health = health.NewSet()
	}
	st, err := newStoreState(o)
	if err != nil {
		return nil, err
	}
	s := &Scheduler{t: newTable(r, o), health: o.health, rec: o.rec, log: o.log, ld: newLoadState(r.load, o.rec), store: st}
	if st != nil {
		st.st.Watch(s.invalidate)
		if r, ok := st.st.(StoreWatchResync); ok {
			r.WatchResync(s.resync)
		}
	}
	return s, nil
}

// Health returns the health set the Scheduler reads (the one given to WithHealth, or its
// own). Marking a backend there takes effect on the next call.
func (s *Scheduler) Health() *health.Set { return s.health }

// Table returns the underlying binding table (shared, not a copy).
func (s *Scheduler) Table() *Table { return s.t }

// validate checks the arguments that need no table access. The candidates themselves are
// checked in the pass that uses them (pick on a miss, findBackend on a hit).
func (s *Scheduler) validate(sessionID, tier string, candidates []Backend) error {
	if err := s.t.checkKey(sessionID, tier); err != nil {
		return err
	}
	if len(candidates) == 0 {
		return ErrNoCandidates
	}
	return nil
}

func invalidCandidate(i int) error {
	return fmt.Errorf("%w: candidates[%d] has an empty ID (zero Backend?)", ErrInvalidBackend, i)
}

// state returns the health state of id, skipping the map lookup when all are healthy.
func (s *Scheduler) state(id string) health.State {
	if s.health.AllHealthy() {
		return health.Healthy
	}
	return s.health.State(id)
}

// slotState is state(slot.id) for the backend of a binding on the hit path, the shard
// lock held: while some backend is not Healthy (a drain, say) the answer is cached in the
// slot and read again only when the health set's Version has changed, so a hit does not
// look the ID up in the set's map. One or two atomic loads.
func (s *Scheduler) slotState(slot *backendSlot) health.State {
	if s.health.AllHealthy() {
		return health.Healthy
	}
	if v := s.health.Version(); slot.hver != v {
		slot.hstate, slot.hver = s.health.State(slot.id), v // Version first: see its doc
	}
	return slot.hstate
}

// pickInline is the number of candidates whose hrw nodes pickAll copies to a stack array
// so that it can use hrw.Pick; more candidates use a pooled slice.
const pickInline = 64

// pick returns the index of the HRW winner over the eligible candidates (Healthy ones;
// Draining ones only when no candidate is Healthy; never Down) and its state. It fails
// with ErrInvalidBackend if a candidate is the zero Backend, ErrNoEligibleBackend if all
// are Down. Fast path: the winner over all candidates, accepted when it is Healthy (it
// then wins among the Healthy ones too). 0 allocs (a pooled scratch slice beyond 64 candidates).
func (s *Scheduler) pick(kh uint64, cands []Backend) (int, health.State, error) {
	w, bad := s.pickAll(kh, cands)
	if bad >= 0 {
		return -1, health.Down, invalidCandidate(bad)
	}
	if w < 0 { // no positive weight: cannot happen with NewBackend, kept for safety
		return -1, health.Down, noEligible(cands)
	}
	if s.state(cands[w].node.ID()) == health.Healthy {
		return w, health.Healthy, nil
	}
	var b hrw.Best
	for _, want := range [...]health.State{health.Healthy, health.Draining} {
		b.Reset(kh)
		for i := range cands {
			if s.health.State(cands[i].node.ID()) == want {
				b.Offer(i, &cands[i].node)
			}
		}
		if w := b.Index(); w >= 0 {
			return w, want, nil
		}
	}
	return -1, health.Down, noEligible(cands)
}

// pickAll returns the HRW winner over all candidates, health ignored, and in the same
// pass the index of the first zero Backend (or -1). Candidates of one weight are scored
// in place by pickEqual; otherwise (mixed weights, a zero Backend, a 53-bit tie) their
// nodes are copied to a scratch slice (a stack array up to pickInline candidates, a
// pooled slice beyond) and ranked by hrw.Pick. Both give hrw.Pick's winner.
func (s *Scheduler) pickAll(kh uint64, cands []Backend) (w, invalid int) {
	if w, ok := pickEqual(kh, cands); ok {
		return w, -1
	}
	if len(cands) <= pickInline {
		var buf [pickInline]hrw.Node
		return pickNodes(kh, cands, buf[:0])
	}
	p, ok := s.nodes.Get().(*[]hrw.Node)
	if !ok {
		p = new([]hrw.Node)
	}
	w, invalid = pickNodes(kh, cands, *p)
	if cap(*p) < len(cands) { // pickNodes grew its own copy: keep that one
		*p = make([]hrw.Node, 0, len(cands))
	}
	s.nodes.Put(p)
	return w, invalid
}

// pickNodes copies the candidates' nodes into scratch[:0] (which must not escape: the
// stack array stays on the stack) and returns hrw.Pick over them and the first zero
// Backend's index (or -1).
func pickNodes(kh uint64, cands []Backend, scratch []hrw.Node) (w, invalid int) {
	nodes := scratch[:0]
	invalid = -1
	for i := range cands {
		if invalid < 0 && isZero(&cands[i]) {
			invalid = i
		}
		nodes = append(nodes, cands[i].node)
	}
	return hrw.Pick(kh, nodes), invalid
}

// isZero reports whether b is the zero Backend (NewBackend never builds one: its ID is
// never empty). The hash is compared first: it is 0 for the zero Backend.
func isZero(b *Backend) bool { return b.pre == 0 && b.node.ID() == "" }

// findBackend returns the index of the first candidate with this ID (its premixed node
// hash pre compared first), or -1, and in the same pass the index of the first zero
// Backend (or -1). A zero Backend is the only one with pre 0 and an empty ID; NewBackend
// never builds one. One well-predicted branch per candidate: only the match and zero
// Backends enter it.
func findBackend(cands []Backend, pre uint64, id string) (found, invalid int) {
	found, invalid = -1, -1
	for j := range cands {
		h := cands[j].pre
		if h != pre && h != 0 {
			continue
		}
		switch cid := cands[j].node.ID(); {
		case cid == "": // the zero Backend (pre 0)
			if invalid < 0 {
				invalid = j
			}
		case found < 0 && h == pre && cid == id:
			found = j
		}
	}
	return found, invalid
}

// findSlot is findBackend for the backend of a binding, slot, on the hit path. It first
// tries the candidate where the last hit found this backend (slot.hint), confirming it
// by the pointer of its ID string (equal pointers and lengths: the very string stored
// there) or, failing that, by hash and ID (that string then becomes the hint's); then one pass over all candidates counts those
// whose hash is this backend's or 0 (a zero Backend): exactly one (the hint) means it is
// the first match and no candidate is invalid. The pass has a fixed trip count and no
// data-dependent branch (the counts are conditional moves), so a hint at a varying
// position costs no misprediction. Anything else falls back to findBackend, whose result
// becomes the new hint. Same result as findBackend; O(len(cands)), 0 allocs. The caller
// holds the shard lock (hint is written).
func findSlot(cands []Backend, slot *backendSlot) (found, invalid int) {
	h := int(slot.hint)
	if h < len(cands) {
		id := cands[h].node.ID()
		same := unsafe.StringData(id) == unsafe.StringData(slot.hintID)
		want := slot.pre
		if len(id) == len(slot.id) && (same || (cands[h].pre == want && id == slot.id)) {
			n := 0
			for j := range cands {
				x := cands[j].pre
				eq, zero := 0, 0
				if x == want {
					eq = 1
				}
				if x == 0 {
					zero = 1
				}
				n += eq + zero
			}
			if n == 1 {
				if !same { // confirmed by the bytes: the next hit compares pointers
					slot.hintID = id
				}
				return h, -1
			}
		}
	}
	found, invalid = findBackend(cands, slot.pre, slot.id)
	if found >= 0 {
		slot.hint, slot.hintID = uint32(found), cands[found].node.ID()
	}
	return found, invalid
}

func noEligible(cands []Backend) error {
	return fmt.Errorf("%w: all %d candidates are down", ErrNoEligibleBackend, len(cands))
}

// SelectBackend returns the backend for this turn of (sessionID, tier) among candidates,
// and affinityHit = true exactly when it is the backend of the session's still-valid
// binding (see the package documentation for the full contract). The returned Backend is
// the caller's candidate value.
//
// Errors (nothing stored, nothing counted): ErrEmptySessionID, ErrSessionIDTooLong,
// ErrTierTooLong, ErrNoCandidates, ErrInvalidBackend (a zero Backend among candidates),
// ErrNoEligibleBackend (all candidates Down).
//
// Cost: one xxh3 hash of sessionID; hit O(len(candidates)) compares under one shard lock,
// one clock read, 0 allocs; miss O(len(candidates)) HRW scores (plus a health lookup per
// candidate when the winner is not Healthy), two shard locks, 1 allocation (the stored
// key; 0 with TTL 0) plus the amortized growth described in the package documentation.
// With a shared store (WithStore) a miss also makes one store call (two when the shared
// binding is broken in this replica's view), each bounded by the store timeout; a hit
// makes none (see [Store]), except the first hit of a provisional binding, decided here
// while the store was not answering, which confirms it with one such call first.
func (s *Scheduler) SelectBackend(sessionID, tier string, candidates []Backend) (Backend, bool, error) {
	if !s.t.validKey(sessionID, tier) || len(candidates) == 0 { // validate, inlined
		return Backend{}, false, s.validate(sessionID, tier, candidates)
	}
	ci, out, _, err := s.decide(sessionID, tier, candidates, false, 0)
	if err != nil {
		return Backend{}, false, err
	}
	return candidates[ci], out == OutcomeHit, nil
}

// Forget deletes the binding of (sessionID, tier) — for a session that ended — and
// reports whether there was one. Counts nothing. O(1), 0 allocs. With a shared store
// (WithStore) it also deletes the shared binding (one bounded store call) and every
// replica drops its copy.
func (s *Scheduler) Forget(sessionID, tier string) bool {
	ok := s.t.Delete(sessionID, tier)
	if s.store != nil && s.t.checkKey(sessionID, tier) == nil {
		s.forget(hrw.KeyHash(sessionID), tier)
	}
	return ok
}

// ForgetIf is a compare-and-forget: it deletes the valid binding of (sessionID, tier)
// only if it names backendID, and reports whether a binding was deleted; a binding a
// concurrent request moved to another backend is kept. Invalid arguments (empty
// backendID included) give false. Counts nothing. O(1), 0 allocs without a store.
//
// With a shared store (WithStore) one bounded store call follows when the local binding
// matched, or when this replica holds no valid binding of the key (evicted, expired,
// never seen here): the store's compare-and-delete when it implements [StoreForgetIf]
// (the shared binding goes only if it still names backendID), else, only when the local
// binding matched, Store.Forget. The result is then also true when the store deleted
// the shared binding. A store without StoreForgetIf is not called when nothing matched
// locally: an unconditional delete could drop another replica's move.
func (s *Scheduler) ForgetIf(sessionID, tier, backendID string) bool {
	deleted, absent := s.t.deleteIf(sessionID, tier, backendID)
	if s.store == nil || !(deleted || absent) {
		return deleted
	}
	return s.forgetIf(hrw.KeyHash(sessionID), tier, backendID, deleted) || deleted
}

// Lookup returns the backend ID of the valid (unexpired) binding of (sessionID, tier). It
// never extends the TTL, checks neither health nor candidates, counts nothing, and leaves
// an expired binding in place; invalid arguments give ok=false. O(1), 0 allocs.
func (s *Scheduler) Lookup(sessionID, tier string) (backendID string, ok bool) {
	return s.t.Get(sessionID, tier)
}

// Sweep reclaims every expired binding now and returns how many it removed; see
// [Table.Sweep] for the cost. Call it from your own goroutine (e.g. every minute) if
// traffic may stop while memory matters; nothing calls it for you.
func (s *Scheduler) Sweep() int { return s.t.Sweep() }

// Len returns the number of stored bindings (expired ones not yet reclaimed included).
// O(shards) locks, 0 allocs.
func (s *Scheduler) Len() int { return s.t.Len() }

// Stats returns a snapshot of the counters; see [Table.Stats]. O(shards) locks, 0 allocs.
func (s *Scheduler) Stats() Stats { return s.t.Stats() }
