package health

import "sync/atomic"

type subscriber struct {
	fn     func(Transition)
	from   uint64 // first transition seq this subscriber sees
	active atomic.Bool
}

type queued struct {
	t   Transition
	seq uint64
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
