package health

import (
	"maps"
	"strings"
	"sync"
	"sync/atomic"
)

// Set holds the health State of backends by ID. Only non-Healthy IDs are stored: an ID
// that was never marked, or was marked Healthy again, is Healthy and costs no memory.
//
// The zero value is ready to use (every ID Healthy); [NewSet] is equivalent. A Set must
// not be copied after first use.
//
// Concurrency and cost: all methods are safe for concurrent use. Reads ([Set.State],
// [Set.AllHealthy]) are lock-free and allocation-free: one atomic load of a pointer to an
// immutable map (nil when every backend is Healthy) and, for State, one map lookup. Writes
// ([Set.Set], [Set.MarkDown], [Set.MarkUp], [Set.MarkDraining]) are expected to be rare:
// a write that changes a state takes a mutex and replaces the map with a modified copy
// (copy-on-write: O(n) time for n non-Healthy IDs and a few allocations for the new map,
// plus a copy of the ID when it leaves Healthy and a queue entry when there are
// subscribers); a write that changes nothing takes the mutex but allocates nothing.
//
// Memory: O(number of distinct non-Healthy IDs), plus the queue of transitions not yet
// delivered to subscribers (empty except while a subscriber is slower than writers).
//
// Subscribers ([Set.Subscribe]) receive every transition that changed a state, one at a
// time, in the order the changes took effect, and outside any lock of the Set. See
// [Set.Subscribe] for the delivery rules.
type Set struct {
	states atomic.Pointer[map[string]State] // non-Healthy IDs only; nil when all Healthy

	mu         sync.Mutex    // serializes writers; guards the fields below
	subs       []*subscriber // replaced on change, never mutated in place
	seq        uint64        // sequence number of the next transition
	queue      []queued      // transitions waiting for delivery, in seq order
	delivering bool          // some goroutine holds the delivery turn
}

type subscriber struct {
	fn     func(Transition)
	from   uint64 // first transition seq this subscriber sees
	active atomic.Bool
}

type queued struct {
	t   Transition
	seq uint64
}

// NewSet returns an empty Set (every ID Healthy). It is the same as new(Set).
func NewSet() *Set { return &Set{} }

// State returns the state of id; Healthy for an ID the Set does not hold.
// Lock-free, 0 allocs.
func (s *Set) State(id string) State {
	p := s.states.Load()
	if p == nil {
		return Healthy
	}
	return (*p)[id]
}

// AllHealthy reports whether every ID is Healthy (no Draining or Down entries): one atomic
// load, lock-free, 0 allocs. Callers can use it to skip per-backend State lookups.
func (s *Set) AllHealthy() bool { return s.states.Load() == nil }

// Set sets the state of id to to and returns the previous state and whether it changed.
// A no-op (to equals the current state) changes nothing and notifies no subscriber. An
// invalid to (not Healthy, Draining or Down) is ignored: it returns the current state
// and false.
//
// If the change is to be delivered and no other goroutine is delivering, the calling
// goroutine delivers it (and any transitions queued meanwhile) to subscribers before
// Set returns; otherwise Set returns at once and the goroutine holding the delivery turn
// delivers it. Cost: see [Set].
func (s *Set) Set(id string, to State) (from State, changed bool) {
	from, changed, turn := s.update(id, to)
	if turn {
		s.deliver()
	}
	return from, changed
}

// MarkDown sets id to Down and reports whether its state changed. Delivery and cost as
// [Set.Set].
func (s *Set) MarkDown(id string) bool {
	_, changed := s.Set(id, Down)
	return changed
}

// MarkUp sets id to Healthy and reports whether its state changed. Delivery and cost as
// [Set.Set].
func (s *Set) MarkUp(id string) bool {
	_, changed := s.Set(id, Healthy)
	return changed
}

// MarkDraining sets id to Draining and reports whether its state changed. Delivery and
// cost as [Set.Set].
func (s *Set) MarkDraining(id string) bool {
	_, changed := s.Set(id, Draining)
	return changed
}

// Snapshot returns a new map of every non-Healthy ID and its state (empty, never nil, when
// all are Healthy). Changing it does not affect s. Cost: O(non-Healthy IDs), allocates.
func (s *Set) Snapshot() map[string]State {
	p := s.states.Load()
	if p == nil {
		return map[string]State{}
	}
	return maps.Clone(*p)
}

// Subscribe registers fn to receive every transition that takes effect after Subscribe
// returns, and returns a func that unregisters it (idempotent, safe to call from fn).
// A nil fn is ignored and the returned func does nothing.
//
// Delivery rules, across all subscribers of s:
//   - transitions are delivered in the order they took effect, even with concurrent
//     writers; each transition goes to every subscriber (in Subscribe order) before the
//     next one goes to any;
//   - calls are made one at a time (never concurrently) and outside any lock of s, by
//     whichever writer holds the delivery turn — possibly a different goroutine than the
//     one that made the change;
//   - fn may call back into s (State, Set, MarkDown, Subscribe, its own unsubscribe ...):
//     a change it makes is queued and delivered after the current call returns, in order;
//     it does not deadlock;
//   - after unsubscribe returns, fn is not called again, except for at most one call
//     that another goroutine holding the delivery turn had already begun.
//
// fn should be fast: while it runs, later transitions wait in the queue (writers do not
// block, but the goroutine holding the turn does). fn must not panic; if it does, the
// panic propagates to the writer holding the turn, the transition being delivered is lost
// for the remaining subscribers, and the next writer resumes delivery of the queue.
//
// Cost: Subscribe and unsubscribe copy the subscriber list under the mutex
// (O(subscribers) time; both allocate).
func (s *Set) Subscribe(fn func(Transition)) (unsubscribe func()) {
	if fn == nil {
		return func() {}
	}
	sub := &subscriber{fn: fn}
	sub.active.Store(true)
	s.mu.Lock()
	sub.from = s.seq
	subs := make([]*subscriber, 0, len(s.subs)+1)
	s.subs = append(append(subs, s.subs...), sub)
	s.mu.Unlock()

	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !sub.active.Load() {
			return
		}
		sub.active.Store(false)
		subs := make([]*subscriber, 0, len(s.subs))
		for _, o := range s.subs {
			if o != sub {
				subs = append(subs, o)
			}
		}
		if len(subs) == 0 {
			subs = nil
		}
		s.subs = subs
	}
}

// update applies the change under the mutex and queues the transition. turn reports
// that the caller took the delivery turn and must call deliver (outside its own locks).
func (s *Set) update(id string, to State) (from State, changed, turn bool) {
	if !to.Valid() {
		return s.State(id), false, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()

	cur := s.states.Load()
	if cur != nil {
		from = (*cur)[id]
	}
	if from == to {
		return from, false, false
	}

	n := 0
	if cur != nil {
		n = len(*cur)
	}
	switch {
	case to == Healthy:
		n--
	case from == Healthy:
		n++
	}
	if n == 0 {
		s.states.Store(nil)
	} else {
		next := make(map[string]State, n)
		if cur != nil {
			for k, v := range *cur {
				if k != id {
					next[k] = v
				}
			}
		}
		if to != Healthy {
			if from == Healthy {
				id = strings.Clone(id) // a new key: do not retain the caller's backing memory
			}
			next[id] = to
		}
		s.states.Store(&next)
	}

	if len(s.subs) > 0 {
		s.queue = append(s.queue, queued{t: Transition{ID: id, From: from, To: to}, seq: s.seq})
	}
	s.seq++
	if len(s.queue) > 0 && !s.delivering {
		s.delivering = true
		turn = true
	}
	return from, true, turn
}

// deliver drains the queue; it must be called only by the holder of the delivery turn.
func (s *Set) deliver() {
	done := false
	defer func() {
		if !done { // a subscriber panicked: give up the turn so delivery can resume
			s.mu.Lock()
			s.delivering = false
			s.mu.Unlock()
		}
	}()
	for {
		s.mu.Lock()
		if len(s.queue) == 0 {
			s.queue = nil
			s.delivering = false
			s.mu.Unlock()
			done = true
			return
		}
		q := s.queue[0]
		s.queue[0] = queued{}
		s.queue = s.queue[1:]
		subs := s.subs
		s.mu.Unlock()

		for _, sub := range subs {
			if q.seq >= sub.from && sub.active.Load() {
				sub.fn(q.t)
			}
		}
	}
}
