package affinity

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/agentserve/sessionaffinity/health"
	"github.com/agentserve/sessionaffinity/hrw"
	"github.com/agentserve/sessionaffinity/metrics"
)

// Defaults of [WithStoreTimeouts].
const (
	// DefaultStoreTimeout bounds each call to a shared [Store] on the miss path: far
	// below the time of a prefill, far above a round trip to a Redis on the same network.
	DefaultStoreTimeout = 50 * time.Millisecond
	// DefaultStoreRetryAfter is how long the Scheduler leaves the store alone after a
	// failed call before it tries again (it decides locally meanwhile).
	DefaultStoreRetryAfter = time.Second
	// StoreRefreshDivisor: a hit refreshes the store's TTL of its binding at most once per
	// TTL/StoreRefreshDivisor per session and replica; the store keeps a binding for
	// TTL + TTL/StoreRefreshDivisor after its last refresh so that it never expires in
	// the store while a replica still honours it.
	StoreRefreshDivisor = 8
)

// StoreKey names one binding in a shared [Store]: hashes only, never the session ID or
// the tier themselves. Session is hrw.KeyHash(sessionID) and Tier is hrw.KeyHash(tier),
// the documented, unseeded xxh3 hash, so every replica (and a gateway in another
// language) derives the same key. Two sessions whose IDs share a 64-bit hash share a
// binding (about 3e-8 for a million live sessions): they land on one backend, nothing
// breaks.
type StoreKey struct {
	Session uint64
	Tier    uint64
}

// Store is a binding table shared by several Schedulers (gateway replicas), for example
// package affinity/redisstore. The Scheduler's own table stays in front of it as the
// near-cache: a local hit never calls the store (except [Store.Refresh], at most once per
// TTL/8 per session plus once on its first hit after a store error's retry interval or
// after the store's resync signal ([StoreWatchResync]), and the confirmation below); a
// local miss calls it once (Claim) and,
// only when the shared binding is broken in this replica's view, a second time (Rebind).
// Values are backend IDs only.
//
// A binding this replica decided while the store did not answer (skipped after an error,
// or its call failed), or placed without asking it (a parent placement), is provisional: the first hit on it once the store is usable again
// calls Claim with the local backend before answering, which keeps it (claimed, or
// already bound to it), adopts the fleet's binding instead (a hit), or, when the fleet's
// backend is Down or not a candidate here, moves that to the local one with Rebind. A
// failed confirmation leaves it provisional and the hit is answered locally.
//
// Invalidations (Watch) may be lost, e.g. while a replica's subscription to them is
// down: a stale local copy is then corrected by the binding's next Refresh, within TTL/8
// of traffic, or on its first hit after the loss if the store reports it
// ([StoreWatchResync]).
//
// Implementations must be safe for concurrent use and honour ctx (the Scheduler gives
// each call [DefaultStoreTimeout] or the WithStoreTimeouts value). An error makes the
// Scheduler decide from its local table alone, count the error and leave the store alone
// for a while; it never fails a request.
type Store interface {
	// Claim binds key to backendID for ttl if the key has no binding and returns
	// (backendID, true); otherwise it extends the existing binding's ttl and returns
	// (its backend, false). It must be atomic (two replicas claiming at once: one wins).
	Claim(ctx context.Context, key StoreKey, backendID string, ttl time.Duration) (bound string, claimed bool, err error)
	// Rebind is a compare-and-set: if key is bound to old (or to nothing) it binds it to
	// backendID for ttl, tells every replica's Watch function, and returns (backendID,
	// true); otherwise it returns (the current backend, false) and changes nothing.
	Rebind(ctx context.Context, key StoreKey, old, backendID string, ttl time.Duration) (bound string, rebound bool, err error)
	// Refresh extends the binding of key to backendID by ttl, re-creating it if the store
	// lost it. If key is bound to another backend it changes nothing and calls the Watch
	// function of this replica with that backend, so that the local copy is dropped. It
	// is called on the hit path and must not block: queue the work.
	Refresh(key StoreKey, backendID string, ttl time.Duration)
	// Forget deletes the binding of key and tells every replica's Watch function (with
	// backendID "").
	Forget(ctx context.Context, key StoreKey) error
	// Watch registers fn, called (from the store's own goroutine) for every binding of
	// key that some replica rebound to backendID ("" when forgotten). The Scheduler
	// registers itself once in New; fn is cheap and never blocks. A store handed to a new
	// Scheduler (e.g. rebuilt on a config reload) should call only the latest fn.
	Watch(fn func(key StoreKey, backendID string))
}

// StoreWatchResync is an optional extension of [Store] for a store whose invalidations
// (the Watch calls) travel over a feed that can lose messages, as Redis pub/sub does
// while a replica's subscription is down: it tells the Scheduler when that feed has just
// been re-established after a loss, so that invalidations may have been missed. The
// Scheduler then refreshes every binding on its first hit after the call (the queued
// [Store.Refresh] a hit sends at its TTL/8 boundary, sent at once instead), so a binding
// the fleet moved meanwhile is dropped locally and the session's next turn adopts the
// fleet's, and a binding the store lost (a restart) is re-created. A Store without it
// leaves such a binding stale until its next refresh, within TTL/8 of traffic.
type StoreWatchResync interface {
	// WatchResync registers fn. The store calls it once each time its invalidation feed
	// is re-established after a failure (not when it is established at once at
	// startup), and only once the feed delivers the Watch calls of later changes again,
	// so that the refreshes fn leads to cannot miss one. It calls fn from its own
	// goroutine (as the Watch function), not concurrently with itself. fn never blocks:
	// the Scheduler's costs one clock read and a compare-and-swap; the refreshes it
	// leads to are queued by later hits (one per live binding). The Scheduler registers
	// itself once in New; as with Watch, a store handed to a new Scheduler should call
	// only the latest fn.
	WatchResync(fn func())
}

// StoreForgetIf is an optional extension of [Store]: a compare-and-delete, used by
// [Scheduler.ForgetIf], also when the calling replica holds no binding of the key. A Store
// without it is asked to Forget instead (unconditionally), and only when the calling
// replica's own binding matched.
type StoreForgetIf interface {
	// ForgetIf deletes the binding of key only if it is bound to backendID, then tells
	// every replica's Watch function (with backendID ""), and reports whether it deleted;
	// otherwise it changes nothing and tells no one. It must be atomic.
	ForgetIf(ctx context.Context, key StoreKey, backendID string) (forgotten bool, err error)
}

type storeOptions struct {
	st         Store
	timeout    time.Duration
	retryAfter time.Duration
}

// WithStore puts a shared binding [Store] behind the Scheduler's table (see [Store] for
// what it is asked and when). nil keeps the default: no store, every decision local,
// exactly as without this option. Ignored by NewTable. New registers the Scheduler with
// st.Watch; one store serves one Scheduler at a time (a new Scheduler takes it over).
func WithStore(st Store) Option { return optionFunc(func(o *options) { o.store.st = st }) }

// WithStoreTimeouts sets the bound of each store call on the miss path (0: 50 ms,
// [DefaultStoreTimeout]) and how long the store is skipped after an error (0: 1 s,
// [DefaultStoreRetryAfter]). Negative values make New and NewTable fail with
// ErrInvalidConfig, also without WithStore (where the values are unused).
func WithStoreTimeouts(timeout, retryAfter time.Duration) Option {
	return optionFunc(func(o *options) { o.store.timeout, o.store.retryAfter = timeout, retryAfter })
}

// storeState is the Scheduler's side of a Store.
type storeState struct {
	st         Store
	timeout    time.Duration
	retryAfter int64        // nanoseconds
	skipUntil  atomic.Int64 // clock nanos: no store calls before (-1 from New: none); only advances (skipTo)
	errors     atomic.Uint64
	srec       metrics.StoreRecorder // nil: the Recorder does not count store errors
}

// validateStoreTimeouts refuses negative WithStoreTimeouts values, with or without a
// store (and in NewTable, which ignores the store): a negative duration is a caller's
// bug whether or not it is used yet, and failing only once WithStore is added would hide
// it until then.
func validateStoreTimeouts(o options) error {
	if so := o.store; so.timeout < 0 || so.retryAfter < 0 {
		return fmt.Errorf("%w: store timeouts: %v, %v must not be negative", ErrInvalidConfig, so.timeout, so.retryAfter)
	}
	return nil
}

func newStoreState(o options) (*storeState, error) {
	if err := validateStoreTimeouts(o); err != nil {
		return nil, err
	}
	so := o.store
	if so.st == nil {
		return nil, nil
	}
	ss := &storeState{st: so.st, timeout: so.timeout, retryAfter: int64(so.retryAfter)}
	ss.skipUntil.Store(-1) // below every clock reading: no refresh is due from it (refreshDue)
	if ss.timeout == 0 {
		ss.timeout = DefaultStoreTimeout
	}
	if ss.retryAfter == 0 {
		ss.retryAfter = int64(DefaultStoreRetryAfter)
	}
	ss.srec, _ = o.rec.(metrics.StoreRecorder)
	return ss, nil
}

// StoreErrors returns how many store calls failed (each one decided locally instead).
// 0 without a store. One atomic load.
func (s *Scheduler) StoreErrors() uint64 {
	if s.store == nil {
		return 0
	}
	return s.store.errors.Load()
}

func (ss *storeState) fail(op string, now int64) {
	ss.errors.Add(1)
	ss.skipTo(now + ss.retryAfter)
	if ss.srec != nil {
		ss.srec.StoreError(op)
	}
}

// skipTo advances skipUntil to t unless it is already at or past t, so that neither a
// failed call that read the clock before a later one nor a resync shortens a retry
// interval. A compare-and-swap loop, off the hit path.
func (ss *storeState) skipTo(t int64) {
	for {
		su := ss.skipUntil.Load()
		if su >= t || ss.skipUntil.CompareAndSwap(su, t) {
			return
		}
	}
}

// resync is the Scheduler's StoreWatchResync function: the store's invalidation feed
// was re-established after a loss, so any local binding may be stale. It makes every
// binding last used at or before now refresh on its first hit (refreshDue) by advancing
// skipUntil to now: the store stays usable (no call is skipped), and a retry interval
// under way is kept whole (its end, later than now, already makes every binding used
// before it refresh once it is over). One clock read and a compare-and-swap.
func (s *Scheduler) resync() {
	s.store.skipTo(s.t.clock.now())
}

// storeTTL is the TTL a binding gets in the store: the sticky TTL plus one refresh
// period, so that hits refreshing at most once per period keep it alive.
func storeTTL(ttl int64) time.Duration {
	return time.Duration(ttl + ttl/StoreRefreshDivisor)
}

// refreshDue reports whether a hit at now, on a binding last used at prev, crosses a
// refresh period boundary. Periods are TTL/8 long and offset per session by its hash, so
// that sessions bound at the same moment do not refresh at the same moment.
func refreshDue(kh uint64, prev, now, ttl int64) bool {
	step := ttl / StoreRefreshDivisor
	if step <= 0 {
		return true
	}
	off := int64(kh % uint64(step))
	return (prev+off)/step != (now+off)/step
}

// refreshDue reports whether a hit at now on a binding last used at prev refreshes it in
// the store: at a refresh period boundary (refreshDue), or on its first hit since the
// store became usable again after an error or since the store's invalidation feed was
// re-established (resync): prev at or before skipUntil, now at or past it.
// A binding confirmed before an outage may have been bound elsewhere meanwhile (a move
// whose invalidation was lost, or a store that restarted empty and took another
// replica's claim); that refresh finds the other binding and drops the local copy
// (Store.Refresh), so the session's next turn adopts the fleet's binding instead of
// waiting up to TTL/8. One extra refresh per live binding per outage or resync, queued.
// prev == skipUntil counts as before it: a hit in the same clock reading as a resync
// (one tick of a CoarseClock) may have run before the signal and missed an
// invalidation. The cost: a binding hit in that one reading is refreshed again on its
// next hit (a few bindings per event). O(1).
func (ss *storeState) refreshDue(kh uint64, prev, now, ttl int64) bool {
	if su := ss.skipUntil.Load(); prev <= su && su <= now {
		return true
	}
	return refreshDue(kh, prev, now, ttl)
}

// decision is the outcome of consulting the store on a local miss.
type decision struct {
	idx    int            // candidate to bind and return
	hit    bool           // the fleet's binding was adopted
	reason metrics.Reason // a broken shared binding this call rebound (0: none)
	from   string         // its old backend
}

// consult asks the store which backend the session is bound to across the fleet, given
// this replica's HRW winner w. ok=false: no store, the store is skipped after an error,
// or this call failed (counted): decide locally.
func (s *Scheduler) consult(kh uint64, tier string, cands []Backend, w int, ttl int64, now int64) (d decision, ok bool) {
	ss := s.store
	if ss.skipUntil.Load() > now {
		return d, false
	}
	key := StoreKey{Session: kh, Tier: hrw.KeyHash(tier)}
	ctx, cancel := context.WithTimeout(context.Background(), ss.timeout)
	defer cancel()
	win := cands[w].node.ID()
	cur, claimed, err := ss.st.Claim(ctx, key, win, storeTTL(ttl))
	if err != nil {
		ss.fail(metrics.StoreOpClaim, now)
		return d, false
	}
	if claimed {
		return decision{idx: w}, true
	}
	for range 3 { // each round: another replica rebound in between
		ci, _ := findBackend(cands, premix(hrw.NodeHash(cur)), cur)
		if ci >= 0 && s.state(cur) != health.Down {
			return decision{idx: ci, hit: true}, true
		}
		if cur == win { // our winner turned Down meanwhile: let the caller start over
			return d, false
		}
		reason := metrics.ReasonUnhealthy
		if ci < 0 {
			reason = metrics.ReasonNotCandidate
		}
		var rebound bool
		old := cur
		cur, rebound, err = ss.st.Rebind(ctx, key, old, win, storeTTL(ttl))
		if err != nil {
			ss.fail(metrics.StoreOpRebind, now)
			return d, false
		}
		if rebound {
			return decision{idx: w, reason: reason, from: old}, true
		}
	}
	return d, false
}

// refresh queues the store refresh of a hit's binding.
func (s *Scheduler) refresh(kh uint64, tier, backendID string, ttl int64) {
	s.store.st.Refresh(StoreKey{Session: kh, Tier: hrw.KeyHash(tier)}, backendID, storeTTL(ttl))
}

// forget tells the store that a session ended.
func (s *Scheduler) forget(kh uint64, tier string) {
	ss := s.store
	now := s.t.clock.now()
	if ss.skipUntil.Load() > now {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ss.timeout)
	defer cancel()
	if ss.st.Forget(ctx, StoreKey{Session: kh, Tier: hrw.KeyHash(tier)}) != nil {
		ss.fail(metrics.StoreOpForget, now)
	}
}

// forgetIf is ForgetIf's store call (see there): the store's compare-and-delete, or
// with local (the local binding matched) a plain Forget when the store has none. It
// reports whether the store deleted the shared binding (false for a plain Forget, a
// skipped or failed call). A failed call is counted (store_errors{op="forget"}).
func (s *Scheduler) forgetIf(kh uint64, tier, backendID string, local bool) bool {
	ss := s.store
	fi, ok := ss.st.(StoreForgetIf)
	if !ok {
		if local {
			s.forget(kh, tier)
		}
		return false
	}
	now := s.t.clock.now()
	if ss.skipUntil.Load() > now {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), ss.timeout)
	defer cancel()
	deleted, err := fi.ForgetIf(ctx, StoreKey{Session: kh, Tier: hrw.KeyHash(tier)}, backendID)
	if err != nil {
		ss.fail(metrics.StoreOpForget, now)
		return false
	}
	return deleted
}

// invalidate drops this replica's copy of the binding key unless it is already bound to
// backendID (so a replica ignores the echo of its own rebind). Registered with
// Store.Watch; counts nothing.
func (s *Scheduler) invalidate(key StoreKey, backendID string) {
	s.t.dropHashed(key.Session, key.Tier, backendID)
}

// bindDecided stores the store's decision d in the local table (replacing entry i if
// non-zero, uncounted: the store's decision supersedes it), counts it and returns the
// chosen candidate. Called with sh locked; unlocks it.
func (s *Scheduler) bindDecided(sh *shard, i uint32, kh uint64, tier, sessionID string, cls uint8, cands []Backend, d decision, now int64) (Backend, bool, error) {
	if i != 0 {
		sh.remove(i)
	}
	b := &cands[d.idx].node
	evTier, ev := sh.insert(s.t, uint32(kh), tier, sessionID, cls, b.ID(), cands[d.idx].pre, now, 0)
	if d.hit {
		sh.c.hits++
	} else {
		sh.c.misses++
	}
	if d.reason != 0 {
		sh.c.broken[d.reason]++
	}
	sh.mu.Unlock()
	if d.reason != 0 {
		s.rec.Broken(tier, d.reason)
		if s.log != nil {
			s.log.LogAttrs(context.Background(), slog.LevelDebug, "affinity: broken shared binding rebound",
				slog.String("tier", tier), slog.String("reason", d.reason.String()),
				slog.String("from", d.from), slog.String("to", b.ID()))
		}
	}
	if ev {
		s.rec.Evicted(evTier)
	}
	if d.hit {
		s.rec.Hit(tier)
	} else {
		s.rec.Miss(tier)
	}
	return cands[d.idx], d.hit, nil
}
