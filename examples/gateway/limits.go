package gateway

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// LimitsConfig bounds what requests in flight may hold. Zero or omitted fields take the
// defaults shown; a negative value is [ErrLimitsConfig].
//
// What bounds the gateway's memory: request bodies and buffered responses are charged
// to max_inflight_bytes (a body as it arrives: its buffer starts at min(Content-Length,
// 64 KiB), 512 bytes when the length is unknown, and each doubling is charged before it
// is made; the stream_usage and tenant.cache_salt copies of a body, by their length, before they are made; a non-streaming JSON response buffered for the x_agent_serve object, before
// it is read, by twice its length, or 2 x 16 MiB when unknown); a request that does not
// fit gets a JSON 503 "overloaded" with Retry-After, a response that does not fit passes through unbuffered (without the
// x_agent_serve object). max_inflight_requests (requests whose body is in) and
// max_connections (every client connection, uploading or not) bound the rest, which is
// per request and small (goroutines, bufio and copy buffers: tens of KiB each). Add the binding table
// (affinity.max_bindings, about 200 bytes a binding) for the whole. That bounds the live
// heap; the Go collector lets the heap grow to about twice the live heap (GOGC=100), so
// set GOMEMLIMIT a little above the bound to hold the process near it.
type LimitsConfig struct {
	// MaxInflightBytes bounds the bytes of request bodies and buffered responses held at
	// once (default 256 MiB). Must be >= max_body_bytes.
	MaxInflightBytes int64 `yaml:"max_inflight_bytes"`
	// MaxInflightRequests bounds the proxied requests served at once (default 1024);
	// more get a JSON 503 "overloaded" with Retry-After. A request counts from when its
	// body has been read in full (a request without a body: on arrival) until its
	// response is done; an upload still arriving does not count, so slow uploads cannot
	// hold every slot: they are bounded by MaxConnections, timeouts.read_body_seconds
	// and MaxInflightBytes instead.
	MaxInflightRequests int64 `yaml:"max_inflight_requests"`
	// RetryAfterSeconds is the Retry-After value of those 503s, whole seconds (default 1);
	// the 503 no_backend_available (every candidate down or draining) carries it too.
	RetryAfterSeconds int `yaml:"retry_after_seconds"`
	// MaxHeaderBytes bounds a client's request line and headers (default 65536); larger:
	// HTTP 431 from net/http, which reads 4,096 bytes over it first (its buffer slack),
	// so the effective bound is MaxHeaderBytes + 4096.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxConnections bounds the client connections [Gateway.Serve] holds open at once
	// (default 4096): beyond it, new connections wait in the listen backlog until one
	// closes (golang.org/x/net/netutil.LimitListener), so a flood of slow clients cannot
	// take every file descriptor and goroutine.
	MaxConnections int `yaml:"max_connections"`
}

// Defaults of [LimitsConfig].
const (
	DefaultMaxInflightBytes    int64 = 256 << 20
	DefaultMaxInflightRequests int64 = 1024
	DefaultRetryAfterSeconds         = 1
	DefaultMaxHeaderBytes            = 64 << 10
	DefaultMaxConnections            = 4096
)

func (l LimitsConfig) withDefaults() LimitsConfig {
	if l.MaxInflightBytes == 0 {
		l.MaxInflightBytes = DefaultMaxInflightBytes
	}
	if l.MaxInflightRequests == 0 {
		l.MaxInflightRequests = DefaultMaxInflightRequests
	}
	if l.RetryAfterSeconds == 0 {
		l.RetryAfterSeconds = DefaultRetryAfterSeconds
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxConnections == 0 {
		l.MaxConnections = DefaultMaxConnections
	}
	return l
}

// validate checks l; need is the smallest max_inflight_bytes that lets one request of
// max_body_bytes through, and why says what it is made of (see Config.minInflightBytes).
// Each error names the one key at fault and its value.
func (l LimitsConfig) validate(need int64, why string) error {
	for _, f := range []struct {
		name   string
		v, def int64
	}{
		{"max_inflight_bytes", l.MaxInflightBytes, DefaultMaxInflightBytes},
		{"max_inflight_requests", l.MaxInflightRequests, DefaultMaxInflightRequests},
		{"max_header_bytes", int64(l.MaxHeaderBytes), DefaultMaxHeaderBytes},
		{"max_connections", int64(l.MaxConnections), DefaultMaxConnections},
	} {
		if f.v < 0 {
			return invalid(ErrLimitsConfig, "limits.%s: %d: must be > 0 (0 or omitted: the default, %d)", f.name, f.v, f.def)
		}
	}
	if l.MaxInflightBytes < need {
		return invalid(ErrLimitsConfig, "limits.max_inflight_bytes: %d: must be >= %s", l.MaxInflightBytes, why)
	}
	if v := l.RetryAfterSeconds; v < 0 || v > MaxConfigSeconds {
		// Whole seconds (a Retry-After header's delta-seconds, RFC 9110 section 10.2.3).
		return invalid(ErrLimitsConfig, "limits.retry_after_seconds: %d: must be whole seconds, 1..%g (0 or omitted: the default, %d)",
			v, MaxConfigSeconds, DefaultRetryAfterSeconds)
	}
	return nil
}

// limiter counts requests and bytes in flight against the caps of the request's
// routing snapshot (limits.max_inflight_* are reloadable). Acquisition never blocks: over
// the cap it fails. Safe for concurrent use; O(1), 0 allocs.
type limiter struct {
	bytes, reqs atomic.Int64
}

func take(c *atomic.Int64, n, limit int64) bool {
	if c.Add(n) > limit {
		c.Add(-n)
		return false
	}
	return true
}

// InFlight returns the proxied requests (counted once their body is read, see
// [LimitsConfig.MaxInflightRequests]) and the reserved bytes in flight now (request
// bodies, including those still arriving, and buffered responses, see [LimitsConfig]),
// both including what embedders hold through [Gateway.AcquireRequest] and
// [Gateway.ReserveBytes] (the Envoy ext_proc picker). Safe for concurrent use; O(1).
func (g *Gateway) InFlight() (requests, bytes int64) {
	return g.limits.reqs.Load(), g.limits.bytes.Load()
}

// reserve charges n bytes to r's budget; false when the budget cannot take them.
func (g *Gateway) reserve(st *route, n int64) bool {
	if n <= 0 {
		return true
	}
	if !take(&g.limits.bytes, n, st.rt.cfg.Limits.MaxInflightBytes) {
		return false
	}
	st.reserved.Add(n)
	return true
}

// unreserve returns n of st's reserved bytes.
func (g *Gateway) unreserve(st *route, n int64) {
	if n > 0 {
		st.reserved.Add(-n)
		g.limits.bytes.Add(-n)
	}
}

// overloaded answers a JSON 503 with Retry-After.
func (g *Gateway) overloaded(w http.ResponseWriter, rt *routing, what string) {
	w.Header().Set("Retry-After", strconv.Itoa(rt.cfg.Limits.RetryAfterSeconds))
	writeError(w, http.StatusServiceUnavailable, "overloaded", "gateway overloaded: "+what+"; retry later")
}

// readBody reads r's body under the body-read timeout and the in-flight byte budget,
// charging it to st as it arrives: the buffer starts at min(Content-Length, 64 KiB) (512
// bytes when the length is unknown) and doubles up to the Content-Length or
// max_body_bytes, each growth charged before it is made, so a client that announced a
// large body holds at most one chunk or twice what it sent. A body that fits the first buffer
// is one allocation of exactly its length. It writes the error response itself and returns false on
// failure: 413 over max_body_bytes, 503 over the budget, 408 on a read timeout, 400 on a
// read error. A read that fails because the client's connection ended before the body
// did (an abandoned upload: closed, half-closed or reset short of its Content-Length or
// last chunk) still gets its 400 (a half-closed client may read it) but counts as
// code_class client_closed, like any client that goes away before the response ends; a
// malformed body (bad chunked framing) stays a 4xx. A read the end of Serve's drain
// stops (drainUpload) gets a 503 "shutdown" with Retry-After and Connection: close.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request, st *route) ([]byte, bool) {
	cfg := st.rt.cfg
	max := cfg.MaxBodyBytes
	if r.ContentLength > max {
		// Answered at once, and the connection closed: the server would otherwise read up
		// to 256 KiB of a body refused for its size before sending the answer.
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestEntityTooLarge, "request_too_large",
			fmt.Sprintf("request body exceeds max_body_bytes (%d bytes)", max))
		return nil, false
	}
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	rc := http.NewResponseController(w) // ServeHTTP set the read_body_seconds deadline
	raw := w
	if ow, ok := w.(*outcomeWriter); ok {
		raw = ow.ResponseWriter // MaxBytesReader tells net/http's own writer to close the connection
	}
	// Charged as it grows: a client holds one chunk or twice what it sent at most (bodies.go).
	st.upload.w = raw
	g.drain.trackUpload(&st.upload) // after ServeHTTP's deadline, which a cut overrides
	body, err := readRequestBody(raw, r, max, func(n int64) bool { return g.reserve(st, n) })
	g.drain.untrackUpload(&st.upload)
	if err == nil {
		if st.upload.cut.Load() { // cut as the body ended: the read it stopped is over
			_ = rc.SetReadDeadline(time.Time{})
			st.upload.cut.Store(false) // not answered: the request goes on, the drain cuts its attempt
		}
		// The deadline needs no reset here: net/http's HTTP/1 server clears it itself when
		// the body reaches its end (before the background read it then starts, to notice
		// a client leaving), and an HTTP/2 stream's deadline, firing after the body
		// ended, closes nothing. On failure it stays: the connection is not read again.
		return body, true
	}
	var tooBig *http.MaxBytesError
	switch {
	case st.upload.cut.Load(): // the end of Serve's drain (drain.go), whatever the read's error
		g.log.Info("request cut by the shutdown drain", "backend", "", "status", http.StatusServiceUnavailable,
			"why", "request body still arriving")
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", strconv.Itoa(cfg.Limits.RetryAfterSeconds))
		writeError(w, http.StatusServiceUnavailable, "shutdown",
			"the gateway is shutting down: the request body was still arriving at the end of its drain; retry")
	case errors.Is(err, errOverBudget):
		g.overloaded(w, st.rt, "request bytes in flight exceed limits.max_inflight_bytes")
	case errors.As(err, &tooBig):
		// net/http's server closes the connection after a MaxBytesReader hit (its own
		// hook); say so for any server (server: direct discards up to 256 KiB otherwise).
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestEntityTooLarge, "request_too_large",
			fmt.Sprintf("request body exceeds max_body_bytes (%d bytes)", max))
	case isTimeout(err):
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestTimeout, "request_timeout",
			fmt.Sprintf("request body not received within timeouts.read_body_seconds (%v s)", cfg.Timeouts.ReadBodySeconds))
	case clientLeft(r, err):
		if ow, ok := w.(*outcomeWriter); ok {
			ow.gone = true
		}
		g.log.Debug("client went away during the request body", "err", err)
		// Not the read's error: a connection's error names both ends' addresses.
		writeError(w, http.StatusBadRequest, "bad_body", "reading request body: the client closed the connection before its end")
	default:
		writeError(w, http.StatusBadRequest, "bad_body", "reading request body: "+err.Error())
	}
	return nil, false
}

// clientLeft reports whether err, a failed read of r's body, means the client's
// connection ended before the body did: net/http's server cancels r's context when its
// connection read fails (EOF or reset), its body reader returns io.ErrUnexpectedEOF for a
// body cut short, and a reset is a *net.OpError. A malformed body is none of these.
func clientLeft(r *http.Request, err error) bool {
	var op *net.OpError
	return r.Context().Err() != nil || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &op)
}
