package extproc_test

import (
	"fmt"
	"regexp"
	"sync"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const chatBody = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

// abusive are message sequences carrying more than one request (or a second routing
// decision) on one stream; each wants answers before the stream is refused.
var abusive = []struct {
	name    string
	msgs    func(session string) []*extprocv3.ProcessingRequest
	answers int // answers before the refusal
}{
	{name: "body end of stream twice", answers: 2, msgs: func(s string) []*extprocv3.ProcessingRequest {
		return []*extprocv3.ProcessingRequest{reqHeaders("POST", chatPath, false, duplex, "x-session-id", s),
			reqBody(chatBody, true), reqBody("", true), respHeaders(false), respBody("x", true)}
	}},
	{name: "body after the decision, not end of stream", answers: 2, msgs: func(s string) []*extprocv3.ProcessingRequest {
		return []*extprocv3.ProcessingRequest{reqHeaders("POST", chatPath, false, duplex, "x-session-id", s),
			reqBody(chatBody, true), reqBody(chatBody, false)}
	}},
	{name: "headers-only GET then a POST on the same stream", answers: 1, msgs: func(s string) []*extprocv3.ProcessingRequest {
		return []*extprocv3.ProcessingRequest{reqHeaders("GET", "/v1/models", true, duplex, "x-session-id", s+"-get"),
			reqHeaders("POST", chatPath, false, duplex, "x-session-id", s), reqBody(chatBody, true),
			respHeaders(false), respBody("x", true)}
	}},
	{name: "request headers twice before a decision", answers: 0, msgs: func(s string) []*extprocv3.ProcessingRequest {
		return []*extprocv3.ProcessingRequest{reqHeaders("POST", chatPath, false, duplex, "x-session-id", s),
			reqHeaders("POST", chatPath, false, duplex, "x-session-id", s), reqBody(chatBody, true)}
	}},
	{name: "buffered: body end of stream twice", answers: 2, msgs: func(s string) []*extprocv3.ProcessingRequest {
		return []*extprocv3.ProcessingRequest{reqHeaders("POST", chatPath, false, buffered, "x-session-id", s),
			reqBody(chatBody, true), reqBody(chatBody, true)}
	}},
	{name: "response ended, then a new request", answers: 4, msgs: func(s string) []*extprocv3.ProcessingRequest {
		return []*extprocv3.ProcessingRequest{reqHeaders("POST", chatPath, false, duplex, "x-session-id", s),
			reqBody(chatBody, true), respHeaders(false), respBody("x", true),
			reqHeaders("POST", chatPath, false, duplex, "x-session-id", s), reqBody(chatBody, true)}
	}},
}

// runAbusive sends msgs on a new stream and returns the answers and the error that
// ended the stream.
func runAbusive(t *testing.T, e *env, msgs []*extprocv3.ProcessingRequest) (int, error) {
	t.Helper()
	st, cancel := e.open(t)
	defer cancel()
	for _, m := range msgs {
		if st.Send(m) != nil {
			break // the server ended the stream; Recv reports why
		}
	}
	_ = st.CloseSend() // so a server that accepted it all ends the stream too
	for n := 0; ; n++ {
		if _, err := st.Recv(); err != nil {
			return n, err
		}
	}
}

// assertNothingHeld checks that no lease, in-flight request or outstanding load is
// left: the picker's count, the Scheduler's and the exported gauges.
func assertNothingHeld(t *testing.T, e *env) {
	t.Helper()
	assert.Equal(t, 0, e.srv.InFlight(), "in-flight requests")
	for id := range e.endpoints {
		assert.Equal(t, int64(0), e.g.Scheduler().Load(id).Requests, "outstanding requests of %s", id)
	}
	m := scrape(t, e.g)
	gauges := regexp.MustCompile(`(?m)^(?:agentserve_extproc_inflight_requests|agentserve_gateway_inflight_\w+|agentserve_gateway_backend_outstanding_\w+)(?:\{.*\})? (\S+)$`).FindAllStringSubmatch(m, -1)
	require.Len(t, gauges, 3+2*len(e.endpoints), "gauges in the scrape")
	for _, l := range gauges {
		assert.Equal(t, "0", l[1], l[0])
	}
}

// A stream carries one request: a second request or a second decision is refused with
// InvalidArgument after the answers due, and the first decision's lease is released.
func TestSecondRequestOnStreamRefused(t *testing.T) {
	for _, tt := range abusive {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, "")
			n, err := runAbusive(t, e, tt.msgs("s1"))
			assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), "one request per stream")
			assert.Equal(t, tt.answers, n, "answers before the refusal")
			assertNothingHeld(t, e)
		})
	}
}

// Many concurrent abusive streams, with load-aware placement, leave nothing held, and
// new sessions then still spread over every backend.
func TestAbusiveStreamsLeaveNothingHeld(t *testing.T) {
	e := newEnv(t, backendsYAML+"affinity: {load: {balance_factor: 1.25}}\n")
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = runAbusive(t, e, abusive[i%len(abusive)].msgs(fmt.Sprintf("abuse-%d", i)))
		}()
	}
	wg.Wait()
	assertNothingHeld(t, e)

	used := map[string]bool{}
	for i := range 30 {
		st, cancel := e.open(t)
		send(t, st, reqHeaders("POST", chatPath, false, duplex, "x-session-id", fmt.Sprintf("new-%d", i)),
			reqBody(chatBody, true))
		used[backendOf(e, setHeader(recv(t, st).GetRequestHeaders().GetResponse().GetHeaderMutation(), "x-gateway-destination-endpoint"))] = true
		recv(t, st)
		cancel()
	}
	require.Len(t, used, len(e.endpoints), "new sessions reach every backend")
}

// A request body or trailers before any request headers (Envoy never sends that: a
// broken or hostile client) is refused with InvalidArgument and no answer: no routing
// decision on empty headers, no lease, no request counted, no body buffered. (The
// picker has no metric of protocol errors: ErrSequence and ErrUnsupportedMode are not
// counted either.)
func TestBodyBeforeHeadersRefused(t *testing.T) {
	trailers := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
		RequestTrailers: &extprocv3.HttpTrailers{}}}
	tests := []struct {
		name string
		msgs []*extprocv3.ProcessingRequest
	}{
		{"body, end of stream", []*extprocv3.ProcessingRequest{reqBody(chatBody, true)}},
		{"body, then the headers", []*extprocv3.ProcessingRequest{reqBody(chatBody, false),
			reqHeaders("POST", chatPath, false, duplex, "x-session-id", "s1"), reqBody("", true)}},
		{"empty body chunk first", []*extprocv3.ProcessingRequest{reqBody("", false), reqBody(chatBody, true)}},
		{"trailers first", []*extprocv3.ProcessingRequest{trailers}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, "")
			n, err := runAbusive(t, e, tt.msgs)
			assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), "before the request headers")
			assert.Zero(t, n, "no answer, no routing decision")
			assertNothingHeld(t, e)
			assert.Zero(t, e.g.Scheduler().Len(), "nothing bound")
			counts := regexp.MustCompile(`(?m)^agentserve_extproc_requests_total\{result="(\w+)"\} (\S+)$`).FindAllStringSubmatch(scrape(t, e.g), -1)
			require.Len(t, counts, 5)
			for _, c := range counts {
				assert.Equal(t, "0", c[2], "requests_total{result=%q}: a refused stream is no request", c[1])
			}
		})
	}
}
