package gateway

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds of the end of [Gateway.Serve]'s drain, after drain_seconds or EndDrain: at
// most drainCutGrace + drainHandlerWait (2 s) more before the bindings are saved.
const (
	// drainCutGrace bounds the wait, once the drain's end has cut the requests still
	// waiting for a backend's response headers (each answers a 503 "shutdown") and the
	// event streams still being forwarded (each writes its error event, streamerr.go),
	// for every connection to finish its response before the connections are closed. A request so cut
	// answers at once — its attempt is cancelled — unless its client is not reading;
	// the close then ends it without its answer. A response being copied that was not
	// cut (a JSON body) may end in that time too.
	drainCutGrace = time.Second
	// drainHandlerWait bounds the wait, once the connections are closed, for the handlers
	// still running to return — each logs its cut ("request cut by the shutdown drain")
	// — before Serve closes the gateway and saves the bindings. Their connections and
	// backend attempts are closed by then, so they return within milliseconds.
	drainHandlerWait = time.Second
)

// shutdownDrain is the state of [Gateway.Serve]'s shutdown drain: whether it has ended
// (requests still running then were cut by it), the request to end it early
// ([Gateway.EndDrain]), the backend attempts running — an event stream's among them —
// (cut at its end with errDrainCut, see cutAll) and the count of Serve's handlers
// running (waited for before Serve returns). New makes endCh and idle. Safe for concurrent use.
type shutdownDrain struct {
	cut     atomic.Bool // the drain is over: the remaining connections are being closed
	endOnce sync.Once
	endCh   chan struct{} // closed by end

	mu       sync.Mutex
	attempts map[*attemptTimer]struct{} // attempts running: from their request to their body's close (attempt)
	uploads  map[*drainUpload]struct{}  // request bodies being read (readBody)
	cutting  bool                       // they were cut: one tracked from now on is cut at once

	running atomic.Int64  // Serve's handlers running (counted)
	waiting atomic.Bool   // waitHandlers is waiting for running to reach 0
	idle    chan struct{} // capacity 1: the handler that brings running to 0 while waiting signals it
}

// end asks the drain to end now (idempotent).
func (d *shutdownDrain) end() { d.endOnce.Do(func() { close(d.endCh) }) }

// trackAttempt records at, a backend attempt about to send its request, until
// untrackAttempt (when it failed, or its response body is closed); after the drain's
// end (cutAll) it cuts at at once instead. One lock (every attempt takes two).
func (d *shutdownDrain) trackAttempt(at *attemptTimer) {
	d.mu.Lock()
	if d.cutting {
		d.mu.Unlock()
		at.cancel(errDrainCut)
		return
	}
	if d.attempts == nil {
		d.attempts = make(map[*attemptTimer]struct{})
	}
	d.attempts[at] = struct{}{}
	d.mu.Unlock()
}

// untrackAttempt forgets at: it failed, its response body was closed, or it became a
// tunnel. Idempotent. One lock.
func (d *shutdownDrain) untrackAttempt(at *attemptTimer) {
	d.mu.Lock()
	delete(d.attempts, at)
	d.mu.Unlock()
}

// cutAll cancels, with errDrainCut, every attempt still running: one waiting for its
// response headers, or whose JSON body the gateway is reading whole (inject_metadata),
// answers a 503 "shutdown" (proxyError); an event stream writes its error event and
// ends (streamerr.go); a body being copied through is cut. It stops the reads of the
// request bodies still arriving too (drainUpload: each answers a 503 "shutdown").
// trackAttempt and trackUpload cut what they are given from now on.
func (d *shutdownDrain) cutAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cutting = true
	for at := range d.attempts {
		at.cancel(errDrainCut)
	}
	for u := range d.uploads {
		u.stop()
	}
}

// drainUpload is a request whose body its handler is reading (readBody), which the
// drain's end cuts (cutAll). Decision (small2; tester38: such an upload got no answer
// when the connections were closed, and was logged with backend "" and status 400): the
// read is stopped (its connection's read deadline set to now, its write side intact)
// and readBody answers a JSON 503 "shutdown" with Retry-After and Connection: close, as
// a request waiting for its backend's headers gets; it is logged once at Info as the
// drain's cut and counted 5xx by the gateway. Kept in the route: no allocation.
type drainUpload struct {
	w   http.ResponseWriter // the connection's writer: its read deadline stops the read
	cut atomic.Bool         // the drain's end stopped the read
}

// stop marks u cut and makes its body's read fail now. Safe while the read runs.
func (u *drainUpload) stop() {
	u.cut.Store(true)
	_ = http.NewResponseController(u.w).SetReadDeadline(time.Now())
}

// trackUpload records u, a body read about to start, until untrackUpload; after the
// drain's end (cutAll) it stops u at once instead. One lock.
func (d *shutdownDrain) trackUpload(u *drainUpload) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cutting {
		u.stop()
		return
	}
	if d.uploads == nil {
		d.uploads = make(map[*drainUpload]struct{})
	}
	d.uploads[u] = struct{}{}
}

// untrackUpload forgets u: its read has ended. Idempotent. One lock.
func (d *shutdownDrain) untrackUpload(u *drainUpload) {
	d.mu.Lock()
	delete(d.uploads, u)
	d.mu.Unlock()
}

// counted returns h counting its calls in d.running while they run.
func (d *shutdownDrain) counted(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.running.Add(1)
		defer d.handlerDone()
		h.ServeHTTP(w, r)
	})
}

// handlerDone ends a counted call (also when it panics: http.ErrAbortHandler).
func (d *shutdownDrain) handlerDone() {
	if d.running.Add(-1) == 0 && d.waiting.Load() {
		select {
		case d.idle <- struct{}{}:
		default:
		}
	}
}

// waitHandlers waits until no counted handler runs, or until ctx is done; it returns
// how many still run. (waiting is set before running is read, and a handler reads
// waiting after it decremented running: one of the two sees the other.)
func (d *shutdownDrain) waitHandlers(ctx context.Context) int64 {
	d.waiting.Store(true)
	for {
		if n := d.running.Load(); n == 0 {
			return 0
		}
		select {
		case <-d.idle:
		case <-ctx.Done():
			return d.running.Load()
		}
	}
}

// EndDrain ends [Gateway.Serve]'s shutdown drain at once: the requests still running are
// cut as if drain_seconds had passed (event streams get the error event, the connections
// are closed, tunnels too), and Serve goes on to close and save the bindings. Called before the drain began, the drain ends
// as soon as it begins. The command calls it on a second SIGINT or SIGTERM (kill twice =
// now). Idempotent; safe for concurrent use.
func (g *Gateway) EndDrain() { g.drain.end() }

// logCut logs a request whose client connection ended before its response did (the
// backend cut nothing): cut by Serve's drain, which closed the connection with the
// request still running — the gateway's doing, not the client's (counted client_closed
// all the same: its client got no whole answer) — or a client that went away mid-response
// (Debug).
func (g *Gateway) logCut(st *route, r *http.Request) {
	w := &st.ow
	if st.upload.cut.Load() {
		return // answered and logged by readBody
	}
	drained := g.drain.cut.Load() && (w.gone || w.shut || r.Context().Err() != nil)
	if !drained && !w.gone {
		return // the common case: no lock taken
	}
	b, _ := st.current()
	switch {
	case drained:
		id := ""
		if b != nil {
			id = b.id
		}
		g.log.Info("request cut by the shutdown drain", "backend", id, "status", w.code)
	case w.stalled:
		id := ""
		if b != nil {
			id = b.id
		}
		g.log.Info("client stopped reading: response aborted after timeouts.client_write_seconds",
			"backend", id, "status", w.code, "client_write_seconds", st.rt.cfg.Timeouts.ClientWriteSeconds)
	case b != nil:
		g.log.Debug("client went away mid-response", "backend", b.id, "status", w.code)
	}
}

// shutdown drains srv for up to drain (or until [Gateway.EndDrain]), then cuts the
// requests still waiting for their backend's response headers (each answers a 503
// "shutdown") and the event streams still running (each writes its error event:
// streamerr.go), waits drainCutGrace at most for their connections to finish their
// responses, closes what is left and ends the tunnels; each request still running then
// is logged as cut by the drain (route.go). It reports why the drain ended early: "" (every request
// finished), "drain_seconds" or "EndDrain".
func (g *Gateway) shutdown(ctx context.Context, srv httpServer, drain time.Duration, closeTunnels func()) string {
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
	defer scancel()
	ended := make(chan struct{})
	var early atomic.Bool
	go func() {
		defer close(ended)
		select {
		case <-g.drain.endCh:
			early.Store(true)
			scancel()
		case <-sctx.Done():
		}
	}()
	err := srv.Shutdown(sctx)
	if err == nil {
		// Shutdown does not wait for hijacked connections: upgrade tunnels still open get
		// the rest of the drain too (their handlers are counted), then are closed below
		// (tester40: a tunnel alone was cut the instant the drain began).
		if g.drain.waitHandlers(sctx) > 0 {
			err = sctx.Err()
		}
	}
	scancel()
	<-ended
	why := ""
	if err != nil {
		why = "drain_seconds"
		if early.Load() {
			why = "EndDrain"
		}
		g.drain.cut.Store(true) // before anything is cut and the connections close: their handlers log the cut
		g.drain.cutAll()
		// Shutdown again, for the grace: it returns once every connection has finished its
		// response (the handler's return is not enough: net/http writes a response's end
		// after it) and closes them; a hijacked tunnel is not waited for. Tunnels end after
		// this: every request's context derives from theirs, and a request whose context
		// ends answers nothing (a client that went away). A second Shutdown returns the
		// closed listeners' error: only the grace's end counts.
		gctx, gcancel := context.WithTimeout(context.WithoutCancel(ctx), drainCutGrace)
		_ = srv.Shutdown(gctx)
		if gctx.Err() != nil {
			g.log.Info("requests cut by the drain still running: closing their connections", "waited", drainCutGrace)
		}
		gcancel()
		_ = srv.Close()
	}
	g.drain.cut.Store(true) // tunnels end now
	closeTunnels()
	return why
}
