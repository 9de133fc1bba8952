package extproc_test

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/extproc"
)

// immediateOf returns the status, error code and headers of an ImmediateResponse.
func immediateOf(t *testing.T, r *extprocv3.ProcessingResponse) (int, string, *extprocv3.HeaderMutation) {
	t.Helper()
	ir := r.GetImmediateResponse()
	require.NotNil(t, ir, "want an ImmediateResponse, got %v", r)
	return int(ir.GetStatus().GetCode()), strings.TrimPrefix(ir.GetDetails(), "agentserve_epp_"), ir.GetHeaders()
}

// closeAndDrain ends the client side of st and waits for the server to end the stream
// (after it has released what the stream held).
func closeAndDrain(t *testing.T, st extprocv3.ExternalProcessor_ProcessClient) {
	t.Helper()
	require.NoError(t, st.CloseSend())
	for {
		if _, err := st.Recv(); err != nil {
			assert.ErrorIs(t, err, io.EOF)
			return
		}
	}
}

// Unfinished bodies are charged to limits.max_inflight_bytes as their buffers grow;
// over it: 503 overloaded with Retry-After; the bytes return when the streams end.
func TestInflightBytesBudget(t *testing.T) {
	e := newEnv(t, backendsYAML+"max_body_bytes: 4096\nlimits: {max_inflight_bytes: 8256, retry_after_seconds: 7}\n")
	chunk := strings.Repeat("x", 3000)
	type answer struct {
		i   int
		r   *extprocv3.ProcessingResponse
		err error
	}
	answers := make(chan answer, 3)
	var streams []extprocv3.ExternalProcessor_ProcessClient
	for i := range 3 { // two fit the budget (3000-byte buffers each), whichever comes third does not
		st, _ := e.open(t)
		send(t, st, reqHeaders("POST", chatPath, false, duplex, "x-session-id", fmt.Sprint("s", i)), reqBody(chunk, false))
		streams = append(streams, st)
		go func() {
			r, err := st.Recv()
			answers <- answer{i, r, err}
		}()
	}
	first := <-answers // only the refused stream answers while the others wait for their body
	require.NoError(t, first.err)
	status, code, hs := immediateOf(t, first.r)
	assert.Equal(t, 503, status)
	assert.Equal(t, "overloaded", code)
	assert.Equal(t, "7", setHeader(hs, "retry-after"))
	_, bytes := e.g.InFlight()
	assert.Equal(t, int64(6000), bytes, "two bodies, each charged its 3000-byte buffer")
	assert.True(t, strings.Contains(scrape(t, e.g), "\nagentserve_gateway_inflight_bytes 6000\n"), "the gateway's gauge")
	for i, st := range streams {
		if i != first.i {
			require.NoError(t, st.CloseSend())
		}
	}
	for range 2 {
		a := <-answers
		assert.ErrorIs(t, a.err, io.EOF, "stream %d ends without an answer", a.i)
	}
	assertNothingHeld(t, e)
}

// A decision holds one of limits.max_inflight_requests until its response ends.
func TestInflightRequestsLimit(t *testing.T) {
	e := newEnv(t, backendsYAML+"limits: {max_inflight_requests: 1}\n")
	a, _ := e.open(t)
	send(t, a, reqHeaders("POST", chatPath, false, duplex, "x-session-id", "a"), reqBody(chatBody, true))
	recv(t, a)
	recv(t, a)
	req, _ := e.g.InFlight()
	assert.Equal(t, int64(1), req)

	b, _ := e.open(t)
	send(t, b, reqHeaders("POST", chatPath, false, duplex, "x-session-id", "b"), reqBody(chatBody, true))
	status, code, hs := immediateOf(t, recv(t, b))
	assert.Equal(t, 503, status)
	assert.Equal(t, "overloaded", code)
	assert.Equal(t, "1", setHeader(hs, "retry-after"))

	send(t, a, respHeaders(false), respBody("done", true))
	recv(t, a)
	recv(t, a)
	closeAndDrain(t, a)
	assertNothingHeld(t, e)
	c, _ := e.open(t)
	send(t, c, reqHeaders("POST", chatPath, false, duplex, "x-session-id", "c"), reqBody(chatBody, true))
	assert.NotNil(t, recv(t, c).GetRequestHeaders(), "a slot is free again")
}

// fakeTimer is a body read timeout's timer the test fires.
type fakeTimer struct {
	d    chan time.Duration // the durations asked for
	fire chan time.Time
}

func newFakeTimer() *fakeTimer {
	return &fakeTimer{d: make(chan time.Duration, 8), fire: make(chan time.Time)}
}

func (f *fakeTimer) option() extproc.Option {
	return extproc.WithTimer(func(d time.Duration) (<-chan time.Time, func() bool) {
		f.d <- d
		return f.fire, func() bool { return true }
	})
}

// timeouts.read_body_seconds bounds the wait from the stream's start to the decision:
// 408, and the stream ends; after the decision the timer no longer matters.
func TestReadBodyTimeout(t *testing.T) {
	ft := newFakeTimer()
	e := newEnvWith(t, backendsYAML+"timeouts: {read_body_seconds: 2.5}\n", []extproc.Option{ft.option()})
	st, _ := e.open(t)
	send(t, st, reqHeaders("POST", chatPath, false, duplex, "x-session-id", "slow"), reqBody(`{"model":`, false))
	assert.Equal(t, 2500*time.Millisecond, <-ft.d)
	ft.fire <- time.Time{}
	status, code, _ := immediateOf(t, recv(t, st))
	assert.Equal(t, 408, status)
	assert.Equal(t, "request_timeout", code)
	_, err := st.Recv()
	assert.ErrorIs(t, err, io.EOF)
	assertNothingHeld(t, e)

	decided, _ := e.open(t)
	send(t, decided, reqHeaders("POST", chatPath, false, duplex, "x-session-id", "fast"), reqBody(chatBody, true))
	<-ft.d
	recv(t, decided)
	recv(t, decided)
	select {
	case ft.fire <- time.Time{}:
		t.Fatal("the timer is still watched after the decision")
	default: // nobody receives: the decided stream no longer waits on it
	}
	send(t, decided, respHeaders(false))
	assert.NotNil(t, recv(t, decided).GetResponseHeaders(), "the response passes after the timeout would have fired")
}

// Request headers over limits.max_header_bytes get 431; a header value with a control
// character gets 400 (as net/http answers the HTTP gateway's clients).
func TestRequestHeaderChecks(t *testing.T) {
	many := make([]string, 0, 2000)
	for i := range 1000 {
		many = append(many, fmt.Sprint("x-h", i), "v")
	}
	tests := []struct {
		name   string
		kv     []string
		status int
		code   string
	}{
		{"one large header", []string{"x-big", strings.Repeat("a", 2000)}, 431, "request_header_fields_too_large"},
		{"many header lines", many, 431, "request_header_fields_too_large"},
		{"NUL in the session ID", []string{"x-session-id", "a\x00b"}, 400, "invalid_header"},
		{"CR in the session ID", []string{"x-session-id", "a\rb"}, 400, "invalid_header"},
		{"LF in the session ID", []string{"x-session-id", "a\nb"}, 400, "invalid_header"},
		{"DEL in another header", []string{"x-other", "a\x7f"}, 400, "invalid_header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, backendsYAML+"limits: {max_header_bytes: 1024}\n")
			st, _ := e.open(t)
			send(t, st, reqHeaders("POST", chatPath, false, duplex, tt.kv...))
			status, code, _ := immediateOf(t, recv(t, st))
			assert.Equal(t, tt.status, status)
			assert.Equal(t, tt.code, code)
			_, err := st.Recv()
			assert.ErrorIs(t, err, io.EOF)
			assertNothingHeld(t, e)
		})
	}
	t.Run("tab and a header just under the limit pass", func(t *testing.T) {
		e := newEnv(t, backendsYAML+"limits: {max_header_bytes: 1024}\n")
		st, _ := e.open(t)
		send(t, st, reqHeaders("POST", chatPath, false, duplex, "x-session-id", "a\tb", "x-pad", strings.Repeat("p", 800)),
			reqBody(chatBody, true))
		assert.NotNil(t, recv(t, st).GetRequestHeaders())
	})
}
