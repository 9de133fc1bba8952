package gateway

import (
	"time"
)

// TimeoutsConfig bounds every wait of the gateway, in seconds. Zero or omitted means the
// default shown; a negative, NaN or Inf value is [ErrTimeoutConfig].
type TimeoutsConfig struct {
	// DialSeconds bounds opening a TCP connection to a backend (default 5). Applies to the
	// gateway-owned transport; with [WithTransport] configure your own.
	DialSeconds float64 `yaml:"dial_seconds"`
	// ResponseHeaderSeconds bounds the wait from sending a request to a backend until its
	// response headers arrive (default 300). A non-streaming completion sends its headers
	// only when the whole answer is ready, so this also bounds generation time; a
	// streaming one sends them at once. Exceeded: JSON 504 backend_timeout, and one
	// connection failure for outlier detection unless the backend sent response headers
	// or body bytes for other requests during the wait (slow, not wedged: see
	// [OutlierConfig]). A client that gives up first counts nothing for outlier
	// detection: a hung backend (accepts, never answers, /health 200) is never ejected
	// while every client's timeout is shorter; set this below your clients' timeouts for
	// non-streaming traffic, or rely on the active check where the hang shows on the
	// health path.
	ResponseHeaderSeconds float64 `yaml:"response_header_seconds"`
	// StreamIdleSeconds bounds the silence between two chunks of a response body
	// (default 60). Exceeded: the response is aborted (the client sees a cut stream) and
	// one connection failure is counted unless the backend sent response headers or body
	// bytes for other requests during the silence (see [OutlierConfig]).
	StreamIdleSeconds float64 `yaml:"stream_idle_seconds"`
	// BackendIdleConnSeconds closes idle keep-alive connections to backends after this
	// long (default 4: below the ~5 s keep-alive of vLLM's uvicorn server, so the gateway
	// closes first and never reuses a connection the backend is closing).
	BackendIdleConnSeconds float64 `yaml:"backend_idle_conn_seconds"`
	// ReadHeaderSeconds bounds reading a client's request headers (default 10).
	ReadHeaderSeconds float64 `yaml:"read_header_seconds"`
	// ReadBodySeconds bounds reading a client's request body (default 60), from the
	// start of the handler; it also bounds the server's discard of a body left unread
	// after an earlier answer (a refused method or path, an ops path, a 413). Exceeded:
	// JSON 408 and the connection is closed.
	ReadBodySeconds float64 `yaml:"read_body_seconds"`
	// ClientIdleSeconds closes idle keep-alive client connections (default 60).
	ClientIdleSeconds float64 `yaml:"client_idle_seconds"`
	// ClientWriteSeconds bounds each write of a response to the client (default 60, as
	// nginx's send_timeout): a client that stops reading, so that the gateway's write to
	// it blocks, has its response aborted after between 7/8 of this and all of it (the
	// deadline is renewed by a write at most every eighth of it) and its connection
	// closed; the request's slot (limits.max_inflight_requests) and its backend lease
	// are released, the request counts as code_class client_closed and an Info line
	// "client stopped reading" is logged. It does not bound a whole response: a stream
	// that keeps being read may last as long as the backend sends. Not applied to a
	// connection upgraded by a 101 (a tunnel). A reload's value applies to the requests
	// that start after it (a response being written keeps its request's bound).
	ClientWriteSeconds float64 `yaml:"client_write_seconds"`
}

// Defaults of [TimeoutsConfig], in seconds.
const (
	DefaultDialSeconds            = 5.0
	DefaultResponseHeaderSeconds  = 300.0
	DefaultStreamIdleSeconds      = 60.0
	DefaultBackendIdleConnSeconds = 4.0
	DefaultReadHeaderSeconds      = 10.0
	DefaultReadBodySeconds        = 60.0
	DefaultClientIdleSeconds      = 60.0
	DefaultClientWriteSeconds     = 60.0
)

func (t TimeoutsConfig) withDefaults() TimeoutsConfig {
	t.DialSeconds = orDefault(t.DialSeconds, DefaultDialSeconds)
	t.ResponseHeaderSeconds = orDefault(t.ResponseHeaderSeconds, DefaultResponseHeaderSeconds)
	t.StreamIdleSeconds = orDefault(t.StreamIdleSeconds, DefaultStreamIdleSeconds)
	t.BackendIdleConnSeconds = orDefault(t.BackendIdleConnSeconds, DefaultBackendIdleConnSeconds)
	t.ReadHeaderSeconds = orDefault(t.ReadHeaderSeconds, DefaultReadHeaderSeconds)
	t.ReadBodySeconds = orDefault(t.ReadBodySeconds, DefaultReadBodySeconds)
	t.ClientIdleSeconds = orDefault(t.ClientIdleSeconds, DefaultClientIdleSeconds)
	t.ClientWriteSeconds = orDefault(t.ClientWriteSeconds, DefaultClientWriteSeconds)
	return t
}

func (t TimeoutsConfig) validate() error {
	for _, f := range []struct {
		name   string
		v, def float64
	}{
		{"dial_seconds", t.DialSeconds, DefaultDialSeconds},
		{"response_header_seconds", t.ResponseHeaderSeconds, DefaultResponseHeaderSeconds},
		{"stream_idle_seconds", t.StreamIdleSeconds, DefaultStreamIdleSeconds},
		{"backend_idle_conn_seconds", t.BackendIdleConnSeconds, DefaultBackendIdleConnSeconds},
		{"read_header_seconds", t.ReadHeaderSeconds, DefaultReadHeaderSeconds},
		{"read_body_seconds", t.ReadBodySeconds, DefaultReadBodySeconds},
		{"client_idle_seconds", t.ClientIdleSeconds, DefaultClientIdleSeconds},
		{"client_write_seconds", t.ClientWriteSeconds, DefaultClientWriteSeconds},
	} {
		if p := defaultSecondsProblem(f.v, f.def); p != "" {
			return invalid(ErrTimeoutConfig, "timeouts.%s: %v: %s", f.name, f.v, p)
		}
	}
	return nil
}

// orDefault is v, or def (the value a key takes when omitted) when v is the zero value:
// for defaults, and for what an error message shows for an unset key (tester35:
// `backend_client "" -> "nethttp"`).
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// duration converts seconds to a time.Duration.
func duration(seconds float64) time.Duration { return time.Duration(seconds * float64(time.Second)) }
