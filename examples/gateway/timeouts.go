package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentserve/sessionaffinity/examples/gateway/internal/rawio"
)

// ErrBackendTimeout is wrapped by the errors of requests whose backend did not send
// response headers within timeouts.response_header_seconds, or went silent mid-body for
// timeouts.stream_idle_seconds. The client gets a JSON 504 backend_timeout when nothing
// was written to it yet; the backend gets one connection failure for outlier detection
// unless it generated for other requests during the wait (see [OutlierConfig]).
var ErrBackendTimeout = errors.New("gateway: backend timed out")

// attemptInfo is what httptrace saw of one attempt, and the direct client's response
// body of the attempt (kept here to save its allocation; unused with other transports).
type attemptInfo struct {
	reused    atomic.Bool // the connection came from the idle pool
	wrote     atomic.Bool // the whole request was written without error
	responded atomic.Bool // a byte of a response (a 1xx too) arrived on the connection
	hop       hopBody
}

// traced returns ctx with an httptrace.ClientTrace that records into a (for transports
// other than the directTransport, which records into a directly).
func (a *attemptInfo) traced(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn:              func(i httptrace.GotConnInfo) { a.reused.Store(i.Reused) },
		GotFirstResponseByte: func() { a.responded.Store(true) },
		WroteRequest: func(w httptrace.WroteRequestInfo) {
			if w.Err == nil {
				a.wrote.Store(true)
			}
		},
	})
}

// neverWritten reports whether the backend cannot have received the whole request.
func (a *attemptInfo) neverWritten() bool { return !a.wrote.Load() }

// staleConn reports whether err is a keep-alive connection the backend had closed: a
// connection error on a reused connection before any byte of a response arrived (the
// rule of net/http.Transport). A connection that sent something for this request (a
// 1xx, part of a status line) was alive: its failure is the backend's.
func (a *attemptInfo) staleConn(err error) bool {
	return a.reused.Load() && !a.responded.Load() && IsConnectError(err) && !isTimeout(err)
}

// newTransport returns the gateway-owned transport: a clone of
// http.DefaultTransport with the configured dial timeout and an idle-connection timeout
// below the backends' keep-alive. Built once by New: a Reload does not change them.
func newTransport(t TimeoutsConfig) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	tr.MaxIdleConns = 1024
	tr.IdleConnTimeout = duration(t.BackendIdleConnSeconds)
	tr.DisableCompression = true // pass the client's Accept-Encoding through, never add gzip
	d := &net.Dialer{Timeout: duration(t.DialSeconds), KeepAlive: 30 * time.Second}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return rawio.Wrap(c), nil
	}
	return tr
}

// attempt sends req to b through the base transport with the response-header timeout;
// the returned response's body enforces the stream-idle timeout and releases the
// attempt's context when closed. The error wraps [ErrBackendTimeout] on a timeout.
func (g *Gateway) attempt(req *http.Request, st *route, b *backend) (*http.Response, *attemptInfo, error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	at := &attemptTimer{g: g, backend: b.id, prog: b.prog, gen: generationCall(st.in), cancel: cancel, start: time.Now(), cut: &st.cut,
		hdr: duration(st.rt.cfg.Timeouts.ResponseHeaderSeconds), idle: duration(st.rt.cfg.Timeouts.StreamIdleSeconds)}
	a := &at.info // one allocation for both
	at.arm()
	g.drain.trackAttempt(at) // the end of Serve's drain cuts it with errDrainCut (drain.go), until its body is closed
	var resp *http.Response
	var err error
	if dt, ok := g.base.(*directTransport); ok {
		resp, err = dt.roundTrip(ctx, req, a) // records into a itself
	} else {
		ctx = a.traced(ctx)
		resp, err = g.base.RoundTrip(req.WithContext(ctx))
		err = netHTTPBadResponse(err)
	}
	if err != nil {
		g.drain.untrackAttempt(at)
		at.stop()
		if cause := context.Cause(ctx); errors.Is(cause, ErrBackendTimeout) || errors.Is(cause, errDrainCut) {
			err = cause
		}
		cancel(nil)
		return nil, a, err
	}
	if !at.headersDone() { // the header bound fired as the headers arrived
		g.drain.untrackAttempt(at)
		_ = resp.Body.Close()
		cancel(nil)
		return nil, a, at.fired
	}
	berr := badStatus(resp.StatusCode) // nethttp passes 0-99 and 600-999 on as final answers
	if berr == nil {
		berr = badUpgrade(req, resp) // a 101 nobody asked for: a failure, not a tunnel
	}
	if berr != nil {
		g.drain.untrackAttempt(at)
		at.stop()
		_ = resp.Body.Close()
		cancel(nil)
		return nil, a, berr
	}
	if at.tunnel(resp, cancel) { // 101 Switching Protocols (tunnel.go): ended with the tunnels
		g.drain.untrackAttempt(at)
		return resp, a, nil
	}
	// A 5xx is a failure now; any other response's outcome is recorded when its body ends
	// (idleBody): a success at its end, a connection failure if the backend cuts it or
	// stalls, nothing if the client drops it first — one outcome per attempt
	// (attemptTimer.recorded).
	if resp.StatusCode >= 500 {
		at.recorded.Store(true)
		g.outliers.failure(b.id, status5xx, fmt.Errorf("HTTP %d", resp.StatusCode))
	}
	at.rd = idleBody{rc: resp.Body, ctx: ctx, cancel: cancel, at: at, // no allocation of its own
		bodiless: req.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent ||
			resp.StatusCode == http.StatusNotModified || resp.ContentLength == 0}
	resp.Body = &at.rd
	return resp, a, nil
}

// attemptTimer is the one runtime timer of an attempt, for both of its bounds, armed once
// and never moved earlier: it fires at most min(response_header_seconds,
// stream_idle_seconds) after it was last armed and then checks the bound of the current
// phase. Until the response headers arrive that is response_header_seconds since the
// attempt began (exceeded: the attempt is cancelled). After that it bounds each
// response-body Read to stream_idle_seconds: a Read records when it began (readStart),
// and the timer cuts the response only if a Read has been waiting on the backend that
// long; otherwise it re-arms for the time left (a full period when no Read is waiting: a
// slow client, the proxy blocked writing to it, is never blamed on the backend). So a
// bound fires exactly when it is exceeded, as with a timer per bound reset around every
// Read — but that cost two timer updates per body chunk and one per phase change, and
// each update that makes a timer its P's earliest wakes an idle thread to watch it
// (measured: about 0.2 futex wake-ups per request at concurrency 1); one add and one
// stop per attempt do not.
type attemptTimer struct {
	g         *Gateway
	backend   string
	prog      *progress // the backend's (progress.go): what excuses a timeout
	gen       bool      // a generation call: its body bytes are the backend's progress
	cancel    context.CancelCauseFunc
	hdr, idle time.Duration
	start     time.Time    // monotonic reference of readStart
	readStart atomic.Int64 // 1 + ns since start when the waiting Read began; 0: no Read waiting
	recorded  atomic.Bool  // the attempt's outcome went to outlier detection (once per attempt)
	cut       *atomic.Bool // the request's route.cut: set when the backend cuts or stalls the body

	mu    sync.Mutex
	t     *time.Timer
	body  bool  // the headers arrived: the idle bound applies
	ended bool  // fired for good or stopped
	fired error // the bound that fired, if one did

	rd   idleBody    // the response body, once the headers arrived
	info attemptInfo // what the attempt's connection saw (returned by attempt)
}

// arm starts the timer (the response-header phase).
func (at *attemptTimer) arm() {
	at.mu.Lock()
	at.t = time.AfterFunc(min(at.hdr, at.idle), at.fire)
	at.mu.Unlock()
}

// headersDone switches to the body phase; false if the header bound already fired.
func (at *attemptTimer) headersDone() bool {
	at.mu.Lock()
	defer at.mu.Unlock()
	if at.ended {
		return false
	}
	at.body = true
	return true
}

// stop ends the timer; it never fires afterwards.
func (at *attemptTimer) stop() {
	at.mu.Lock()
	at.ended = true
	at.t.Stop()
	at.mu.Unlock()
}

// beginRead and endRead bracket a body Read that waits on the backend.
func (at *attemptTimer) beginRead() { at.readStart.Store(1 + int64(time.Since(at.start))) }
func (at *attemptTimer) endRead()   { at.readStart.Store(0) }

// fire applies the bound of the current phase (see attemptTimer).
func (at *attemptTimer) fire() {
	at.mu.Lock()
	if at.ended {
		at.mu.Unlock()
		return
	}
	if !at.body {
		elapsed := time.Since(at.start)
		if elapsed < at.hdr {
			at.t.Reset(min(at.idle, at.hdr-elapsed))
			at.mu.Unlock()
			return
		}
		terr := &timeoutError{backend: at.backend, what: "sent no response headers within", d: at.hdr,
			progressed: at.prog.since(at.start)}
		at.ended, at.fired = true, terr
		at.mu.Unlock()
		at.cancel(terr)
		return
	}
	wait := at.idle
	if rs := at.readStart.Load(); rs != 0 {
		waited := time.Since(at.start) - time.Duration(rs-1)
		if waited >= at.idle {
			terr := &timeoutError{backend: at.backend, what: "sent nothing mid-response for", d: at.idle,
				progressed: at.prog.since(at.start.Add(time.Duration(rs - 1)))}
			at.ended, at.fired = true, terr
			at.mu.Unlock()
			if terr.progressed {
				// Slow, not wedged (progress.go): cut, but neither a failure nor a success.
				at.g.log.Info("backend stream stalled", "backend", at.backend, "idle", at.idle,
					"outlier_detection", "not counted: the backend sent other responses meanwhile")
				at.recorded.Store(true)
			} else {
				at.g.log.Warn("backend stream stalled", "backend", at.backend, "idle", at.idle)
				at.fail(terr) // before the cut is visible
			}
			at.cut.Store(true)
			at.cancel(terr)
			return
		}
		wait = at.idle - waited
	}
	at.t.Reset(wait)
	at.mu.Unlock()
}

// succeed records the attempt as a success for outlier detection unless its outcome was
// recorded already (a 5xx, a cut, a stall).
func (at *attemptTimer) succeed() {
	if at.recorded.CompareAndSwap(false, true) {
		at.g.outliers.success(at.backend)
	}
}

// fail records the attempt as a connection failure for outlier detection unless its
// outcome was recorded already.
func (at *attemptTimer) fail(cause error) {
	if at.recorded.CompareAndSwap(false, true) {
		at.g.outliers.failure(at.backend, connectFailure, cause)
	}
}

// idleBody is a response body under its attempt's stream-idle bound (attemptTimer).
// When the bound is hit, the attempt's context is cancelled and reads return an error
// wrapping [ErrBackendTimeout].
type idleBody struct {
	rc       io.ReadCloser
	ctx      context.Context
	cancel   context.CancelCauseFunc
	at       *attemptTimer
	warned   bool // the backend's read error was logged
	bodiless bool // the response has no body (HEAD, 204, 304, Content-Length 0)
}

// Read reads from the backend's body with the idle bound applied. At io.EOF (the body
// ended as its framing says: Content-Length reached, last chunk read) the attempt counts
// as a success for outlier detection. A read that fails returns, by cause: the
// stream-idle bound's error (logged and counted by the timer); errDrainCut when the end
// of the shutdown drain cut it (streamerr.go); exactly context.Canceled
// when the client went away (the request's context is done and the connection was
// closed for it: not a backend failure, and httputil.ReverseProxy logs no read error
// that is context.Canceled); otherwise the backend's own error — it cut the body (reset,
// or closed before the end of the body) — logged once at Warn with the backend named,
// counted as one connection failure for outlier detection, and marked on the request's
// route for its metrics (code_class backend_closed).
func (b *idleBody) Read(p []byte) (int, error) {
	b.at.beginRead()
	n, err := b.rc.Read(p)
	b.at.endRead()
	if n > 0 && b.at.gen {
		b.at.prog.mark(time.Now())
	}
	if err == io.EOF {
		b.at.succeed()
	} else if err != nil {
		err = b.readError(err)
	}
	return n, err
}

func (b *idleBody) readError(err error) error {
	if b.ctx.Err() == nil { // the backend's own failure (reset, closed mid-body)
		if !b.warned {
			b.warned = true
			b.at.g.log.Warn("backend response body read failed", "backend", b.at.backend, "err", err)
			b.at.cut.Store(true)
			b.at.fail(err)
		}
		return err
	}
	if cause := context.Cause(b.ctx); errors.Is(cause, ErrBackendTimeout) || errors.Is(cause, errDrainCut) {
		return cause // a stall, or the end of the shutdown drain (streamerr.go)
	}
	return context.Canceled // the client's context (or the server's connection close) ended it
}

// timeoutError is a backend timeout: it wraps [ErrBackendTimeout], is a net.Error
// timeout, and builds its message only when read (the timers that make it are the rare
// path; the per-request cost is the timers themselves).
type timeoutError struct {
	backend, what string
	d             time.Duration
	progressed    bool // the backend made progress on other requests during the wait (progress.go)
}

// Error says which backend did not answer in time, e.g. "gateway: backend timed out: b1
// sent no response headers within 300ms".
func (e *timeoutError) Error() string {
	return fmt.Sprintf("%v: %s %s %v", ErrBackendTimeout, e.backend, e.what, e.d)
}

// Unwrap returns [ErrBackendTimeout].
func (e *timeoutError) Unwrap() error { return ErrBackendTimeout }

// Timeout reports true (net.Error).
func (e *timeoutError) Timeout() bool { return true }

// Temporary reports false (net.Error).
func (e *timeoutError) Temporary() bool { return false }

// Close stops the timer, closes the backend's body and releases the attempt's context.
// The attempt's outcome for outlier detection is already recorded when the body was read
// to its end (a success), cut or stalled (a failure). A bodiless response (to a HEAD, a
// 204 or 304, Content-Length 0) counts as a success here however far it was read. Any
// other body closed before its end — the client went away (its request's context is
// done: code_class client_closed), or the proxy stopped copying — records nothing:
// neither a failure (nothing says the backend failed) nor a success (nothing says it
// would have finished: a success here would reset the backend's failure streaks on
// every dropped stream).
func (b *idleBody) Close() error {
	if b.bodiless {
		b.at.succeed()
	}
	b.at.stop()
	err := b.rc.Close()
	b.cancel(nil)
	b.at.g.drain.untrackAttempt(b.at)
	return err
}

// isTimeout reports whether err is a network timeout (dial timeout, deadline).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
