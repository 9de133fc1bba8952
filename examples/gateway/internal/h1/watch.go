package h1

import (
	"errors"
	"os"
	"sync/atomic"
	"time"
)

// The client-gone watch of one request (response.watch).
const (
	watchNone    int32 = iota // not watched (yet)
	watchOn                   // a watcher reads the connection
	watchStopped              // the handler returned: never watched again
)

// sweeper starts the client-gone watchers of a Server's long requests: one goroutine
// per Server (started by Serve, when ClientGoneAfter >= 0), ticking every
// ClientGoneAfter/2 while requests are in flight (and one tick after the last) and
// asleep otherwise, so that a request costs it two atomic adds and, only when it
// was asleep, one wake-up.
type sweeper struct {
	running  bool          // under Server.mu
	wake     chan struct{} // capacity 1
	inflight atomic.Int64  // requests in their handler
	started  atomic.Uint64 // requests begun, ever
	sleeping atomic.Bool
}

// begin counts a request in; it wakes the sweeper if it sleeps.
func (sw *sweeper) begin() {
	sw.inflight.Add(1)
	sw.started.Add(1)
	if sw.sleeping.Load() && sw.sleeping.CompareAndSwap(true, false) {
		sw.signal()
	}
}

// sweepEnd counts a request out; the last one after shutdown began wakes the
// sweeper, which then ends (it may wait for ticks that no longer come otherwise).
func (s *Server) sweepEnd() {
	if s.sweep.inflight.Add(-1) == 0 && s.shutting.Load() {
		s.mu.Lock()
		s.sweep.wakeLocked()
		s.mu.Unlock()
	}
}

func (sw *sweeper) signal() {
	if sw.wake == nil {
		return
	}
	select {
	case sw.wake <- struct{}{}:
	default:
	}
}

// wakeLocked wakes the sweeper (under Server.mu): it checks for the shutdown.
func (sw *sweeper) wakeLocked() {
	if sw.running {
		sw.signal()
	}
}

// now is the clock of the watch.
func (s *Server) now() time.Time {
	if s.testNow != nil {
		return s.testNow()
	}
	return time.Now()
}

// goneAfter is ClientGoneAfter or its default.
func (s *Server) goneAfter() time.Duration {
	if s.ClientGoneAfter == 0 {
		return DefaultClientGoneAfter
	}
	return s.ClientGoneAfter
}

// startSweeper starts the sweeper once (Serve).
func (s *Server) startSweeper() {
	if s.ClientGoneAfter < 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sweep.running {
		return
	}
	s.sweep.running = true
	s.sweep.wake = make(chan struct{}, 1)
	go s.sweepLoop(s.sweep.wake)
}

// sweepLoop sleeps while no request is in flight and ticks while some are; it ends
// once the server shuts down with none in flight.
func (s *Server) sweepLoop(wake <-chan struct{}) {
	sw := &s.sweep
	defer func() {
		s.mu.Lock()
		sw.running = false
		s.mu.Unlock()
	}()
	after := s.goneAfter()
	for {
		sw.sleeping.Store(true)
		if sw.inflight.Load() == 0 {
			if s.shutting.Load() {
				return
			}
			<-wake
			if s.shutting.Load() && sw.inflight.Load() == 0 {
				return
			}
		}
		sw.sleeping.Store(false)
		ticks := s.testTicks
		var t *time.Ticker
		if ticks == nil {
			t = time.NewTicker(max(after/2, time.Millisecond))
			ticks = t.C
		}
		last := sw.started.Load()
		for {
			select {
			case <-wake:
				if s.shutting.Load() && sw.inflight.Load() == 0 {
					stop(t)
					return
				}
				continue
			case now := <-ticks:
				if s.testNow != nil {
					now = s.testNow()
				}
				s.watchLong(now, after)
			}
			n := sw.started.Load()
			if sw.inflight.Load() == 0 && n == last {
				break
			}
			last = n
		}
		stop(t)
	}
}

func stop(t *time.Ticker) {
	if t != nil {
		t.Stop()
	}
}

// watchLong starts a watcher for each request running for at least after whose body
// has been read to its end.
func (s *Server) watchLong(now time.Time, after time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		w := c.cur.Load()
		if w == nil || !w.body.eof.Load() || now.Sub(w.start) < after || w.watch.Load() != watchNone {
			continue
		}
		done := make(chan struct{})
		w.watchDone = done
		if w.watch.CompareAndSwap(watchNone, watchOn) {
			go c.watchConn(w, done)
		}
	}
}

// watchConn reads one byte from the connection: a byte is kept for the next request;
// EOF or an error (but the stop's own deadline) cancels the request's context with
// ErrClientGone and the connection closes after the response.
func (c *conn) watchConn(w *response, done chan struct{}) {
	defer close(done)
	n, err := c.rwc.Read(c.cr.byteBuf[:])
	if n == 1 {
		c.cr.hasByte = true
	}
	if err != nil && !(w.watchAborted.Load() && errors.Is(err, os.ErrDeadlineExceeded)) {
		c.gone = true
		w.cancel(ErrClientGone)
	}
}

// stopWatch ends w's watch for good: a running watcher is stopped by a past read
// deadline and waited for, and the deadline cleared. Called by the connection's
// goroutine when the handler returns, and by Hijack.
func (c *conn) stopWatch(w *response) {
	if w.watch.CompareAndSwap(watchNone, watchStopped) || w.watch.Load() == watchStopped {
		return
	}
	w.watchAborted.Store(true)
	_ = c.rwc.SetReadDeadline(aLongTimeAgo)
	<-w.watchDone
	_ = c.rwc.SetReadDeadline(time.Time{})
	w.watch.Store(watchStopped)
}
