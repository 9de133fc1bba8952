package extproc_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentserve/sessionaffinity/examples/extproc"
	"github.com/agentserve/sessionaffinity/examples/gateway"
	"github.com/agentserve/sessionaffinity/health"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	duplex   = filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	buffered = filterv3.ProcessingMode_BUFFERED
	chatPath = "/v1/chat/completions"
)

// exchange runs Envoy's full-duplex sequence for one request of session and returns
// the picked endpoint and the affinity-hit response header.
func exchange(t *testing.T, e *env, session string) (endpoint, hit string) {
	t.Helper()
	st, _ := e.open(t)
	send(t, st,
		reqHeaders("POST", chatPath, false, duplex, "content-type", "application/json", "x-session-id", session),
		reqBody(`{"model":"m",`, false),
		reqBody(`"messages":[{"role":"user","content":"hi"}]}`, true))

	// The header answer is held back until the body is complete (the model is in it).
	h := recv(t, st)
	hr := h.GetRequestHeaders()
	require.NotNil(t, hr, "first answer: request headers, got %v", h)
	endpoint = setHeader(hr.GetResponse().GetHeaderMutation(), extproc.HeaderDestination)
	assert.Equal(t, endpoint, metadataEndpoint(h), "header and metadata carry the same endpoint")
	assert.True(t, hr.GetResponse().GetClearRouteCache())
	b := recv(t, st).GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
	require.NotNil(t, b, "second answer: the streamed request body")
	assert.JSONEq(t, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, string(b.GetBody()))
	assert.True(t, b.GetEndOfStream())
	assert.Equal(t, 1, e.srv.InFlight())
	assert.Equal(t, int64(1), e.g.Scheduler().Load(backendOf(e, endpoint)).Requests, "the pick is a Scheduler lease")

	send(t, st, respHeaders(false))
	rh := recv(t, st).GetResponseHeaders().GetResponse().GetHeaderMutation()
	hit = setHeader(rh, "x-agent-serve-affinity-hit")
	for i, chunk := range []string{"data: {\"a\":1}\n\n", "data: [DONE]\n\n"} {
		eos := i == 1
		send(t, st, respBody(chunk, eos))
		sb := recv(t, st).GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		assert.Equal(t, chunk, string(sb.GetBody()), "response chunks pass through")
		assert.Equal(t, eos, sb.GetEndOfStream())
	}
	assert.Equal(t, 0, e.srv.InFlight(), "released at the end of the response stream")
	assert.Equal(t, int64(0), e.g.Scheduler().Load(backendOf(e, endpoint)).Requests, "the lease is Done")
	require.NoError(t, st.CloseSend())
	_, err := st.Recv()
	assert.ErrorIs(t, err, io.EOF)
	return endpoint, hit
}

func TestFullDuplexSessionAffinity(t *testing.T) {
	e := newEnv(t, "")
	ep1, hit1 := exchange(t, e, "s1")
	assert.Contains(t, e.endpoints, backendOf(e, ep1))
	assert.Equal(t, "false", hit1)
	for range 3 {
		ep, hit := exchange(t, e, "s1")
		assert.Equal(t, ep1, ep, "every turn on the same endpoint")
		assert.Equal(t, "true", hit)
	}
	m := scrape(t, e.g)
	assert.Contains(t, m, `agentserve_affinity_hits_total{tier="default"} 3`)
	assert.Contains(t, m, `agentserve_affinity_misses_total{tier="default"} 1`)
	assert.Contains(t, m, `agentserve_extproc_requests_total{result="hit"} 3`)
	assert.Contains(t, m, `agentserve_extproc_inflight_requests 0`)
}

func backendOf(e *env, endpoint string) string {
	for id, ep := range e.endpoints {
		if ep == endpoint {
			return id
		}
	}
	return ""
}

func TestBufferedMode(t *testing.T) {
	e := newEnv(t, "")
	st, _ := e.open(t)
	send(t, st, reqHeaders("POST", chatPath, false, buffered, "content-type", "application/json", "x-session-id", "s1"))
	h := recv(t, st).GetRequestHeaders()
	require.NotNil(t, h, "BUFFERED: the headers are answered at once")
	assert.Nil(t, h.GetResponse().GetHeaderMutation())
	send(t, st, reqBody(`{"model":"m","messages":[]}`, true))
	r := recv(t, st)
	cr := r.GetRequestBody().GetResponse()
	require.NotNil(t, cr)
	ep := setHeader(cr.GetHeaderMutation(), extproc.HeaderDestination)
	assert.NotEmpty(t, backendOf(e, ep), "the body answer sets the destination: %q", ep)
	assert.Equal(t, ep, metadataEndpoint(r))
	assert.Nil(t, cr.GetBodyMutation(), "the body is not changed")
	send(t, st, respHeaders(false))
	recv(t, st)
	send(t, st, respBody(`{"ok":true}`, true))
	assert.Nil(t, recv(t, st).GetResponseBody().GetResponse(), "BUFFERED response bodies are left alone")
	assert.Equal(t, 0, e.srv.InFlight())
}

func TestHeadersOnlyRequest(t *testing.T) {
	e := newEnv(t, "")
	st, _ := e.open(t)
	send(t, st, reqHeaders("GET", "/v1/models", true, duplex, "x-session-id", "s1"))
	r := recv(t, st)
	ep := setHeader(r.GetRequestHeaders().GetResponse().GetHeaderMutation(), extproc.HeaderDestination)
	assert.NotEmpty(t, backendOf(e, ep))
	assert.Equal(t, ep, metadataEndpoint(r))
	send(t, st, respHeaders(true)) // a bodiless response ends the exchange
	recv(t, st)
	assert.Equal(t, 0, e.srv.InFlight())
	// Hashed by its session without a binding: neither hit nor miss, as in the HTTP
	// gateway (before: counted as a miss).
	m := scrape(t, e.g)
	assert.Contains(t, m, `agentserve_extproc_requests_total{result="unbound"} 1`)
	assert.Contains(t, m, `agentserve_extproc_requests_total{result="miss"} 0`)
}

// Rejections are ImmediateResponses with the gateway's JSON error body; the stream ends.
func TestImmediateResponses(t *testing.T) {
	tests := []struct {
		name   string
		yaml   string
		setup  func(e *env)
		first  *extprocv3.ProcessingRequest
		body   string
		status int
		code   string
	}{
		{name: "malformed JSON body", body: `{"model":`, status: 400, code: "invalid_json"},
		{name: "body is not an object", body: `[1,2]`, status: 400, code: "invalid_json"},
		{name: "model is not a string", body: `{"model":7}`, status: 400, code: "invalid_json"},
		{name: "gzip-encoded JSON body", first: reqHeaders("POST", chatPath, false, duplex, "content-type", "application/json",
			"content-encoding", "gzip", "x-session-id", "s1"), body: `{"model":"m"}`, status: 415, code: "unsupported_content_encoding"},
		{name: "body over max_body_bytes", yaml: backendsYAML + "max_body_bytes: 16\n",
			body: `{"model":"m","messages":[{"role":"user"}]}`, status: 413, code: "request_too_large"},
		{name: "session ID too long", yaml: backendsYAML + "affinity: {max_session_id_bytes: 4}\n",
			body: `{"model":"m"}`, status: 400, code: "session_id_too_long"},
		{name: "unknown tier", first: reqHeaders("POST", chatPath, false, duplex, "content-type", "application/json",
			"x-session-id", "s1", "x-agent-serve-tier", "platinum"), body: `{}`, status: 400, code: "unknown_tier"},
		{name: "no eligible endpoint", body: `{"model":"m"}`, status: 503, code: "no_backend_available",
			setup: func(e *env) {
				for id := range e.endpoints {
					e.g.Scheduler().OnBackendDown(id)
				}
			}},
		{name: "subset hint with no known endpoint", body: `{}`, status: 503, code: "no_backend_available",
			first: withSubset(reqHeaders("POST", chatPath, false, duplex, "x-session-id", "s1"), "192.0.2.1:8000")},
		{name: "empty subset hint", body: `{}`, status: 503, code: "no_backend_available",
			first: withSubset(reqHeaders("POST", chatPath, false, duplex, "x-session-id", "s1"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.yaml)
			if tt.setup != nil {
				tt.setup(e)
			}
			first := tt.first
			if first == nil {
				first = reqHeaders("POST", chatPath, false, duplex, "content-type", "application/json", "x-session-id", "session-1")
			}
			st, _ := e.open(t)
			send(t, st, first, reqBody(tt.body, true))
			ir := recv(t, st).GetImmediateResponse()
			require.NotNil(t, ir)
			assert.Equal(t, tt.status, int(ir.GetStatus().GetCode()))
			assert.Equal(t, "application/json", setHeader(ir.GetHeaders(), "content-type"))
			if tt.status == http.StatusServiceUnavailable { // limits.retry_after_seconds, default 1
				assert.Equal(t, "1", setHeader(ir.GetHeaders(), "retry-after"))
			} else {
				assert.Empty(t, setHeader(ir.GetHeaders(), "retry-after"))
			}
			var body struct {
				Type  string
				Error struct{ Code, Message string }
			}
			require.NoError(t, json.Unmarshal(ir.GetBody(), &body))
			assert.Equal(t, tt.code, body.Error.Code)
			assert.Equal(t, "error", body.Type, "the HTTP gateway's shape: OpenAI's, with Anthropic's top-level type")
			assert.NotContains(t, body.Error.Message, "gateway:", "no Go package prefix")
			assert.NotContains(t, body.Error.Message, "affinity:", "no Go package prefix")
			_, err := st.Recv()
			assert.ErrorIs(t, err, io.EOF, "the picker ends the stream after an immediate response")
			assert.Equal(t, 0, e.srv.InFlight())
			assert.Zero(t, e.g.Scheduler().Len(), "nothing bound")
		})
	}
}

// The data plane's subset hint restricts the pick.
func TestSubsetHint(t *testing.T) {
	e := newEnv(t, "")
	for _, id := range []string{"b0", "b1", "b2"} {
		st, _ := e.open(t)
		send(t, st, withSubset(reqHeaders("POST", chatPath, false, duplex, "x-session-id", "s-"+id), e.endpoints[id], "192.0.2.1:1"),
			reqBody(`{"model":"m"}`, true))
		r := recv(t, st)
		assert.Equal(t, e.endpoints[id], metadataEndpoint(r))
	}
}

// A client (Envoy) that cancels the stream releases the in-flight request.
func TestClientCancel(t *testing.T) {
	e := newEnv(t, "")
	t.Run("after the pick", func(t *testing.T) {
		st, cancel := e.open(t)
		send(t, st, reqHeaders("POST", chatPath, false, duplex, "x-session-id", "s1"), reqBody(`{"model":"m"}`, true))
		recv(t, st)
		recv(t, st)
		send(t, st, respHeaders(false))
		recv(t, st)
		require.Equal(t, 1, e.srv.InFlight())
		cancel()
		require.Eventually(t, func() bool { return e.srv.InFlight() == 0 }, 5e9, 1e6, "released on cancel")
		for id := range e.endpoints {
			assert.Zero(t, e.g.Scheduler().Load(id).Requests, "no lease left on %s", id)
		}
	})
	t.Run("mid body", func(t *testing.T) {
		st, cancel := e.open(t)
		send(t, st, reqHeaders("POST", chatPath, false, duplex, "x-session-id", "s2"), reqBody(`{"model":`, false))
		cancel()
		_, err := st.Recv()
		assert.Equal(t, codes.Canceled, status.Code(err))
		assert.Equal(t, 0, e.srv.InFlight())
		_, ok := e.g.Scheduler().Lookup("s2", "")
		assert.False(t, ok, "no decision without a complete body")
	})
}

func TestUnsupportedBodyMode(t *testing.T) {
	for _, tc := range []struct {
		name      string
		req, resp filterv3.ProcessingMode_BodySendMode
		want      string
	}{
		{"streamed", filterv3.ProcessingMode_STREAMED, filterv3.ProcessingMode_STREAMED, "STREAMED"},
		{"request none", filterv3.ProcessingMode_NONE, filterv3.ProcessingMode_NONE, "request body mode NONE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "")
			st, _ := e.open(t)
			m := reqHeaders("POST", chatPath, false, tc.req, "x-session-id", "s1")
			m.ProtocolConfig.ResponseBodyMode = tc.resp
			send(t, st, m)
			_, err := st.Recv()
			assert.Equal(t, codes.Unimplemented, status.Code(err))
			assert.Contains(t, status.Convert(err).Message(), tc.want)
		})
	}
}

// NONE for the response body is served: the request is decided as usual.
func TestResponseBodyModeNone(t *testing.T) {
	e := newEnv(t, "")
	st, _ := e.open(t)
	m := reqHeaders("GET", "/v1/models", true, filterv3.ProcessingMode_BUFFERED, "x-session-id", "s1")
	m.ProtocolConfig.ResponseBodyMode = filterv3.ProcessingMode_NONE
	send(t, st, m)
	resp, err := st.Recv()
	require.NoError(t, err)
	require.NotNil(t, resp.GetRequestHeaders(), "the headers are answered")
}

// Routing is the gateway's: parent sessions, tenant scope and cache_salt apply.
func TestGatewayRoutingFeatures(t *testing.T) {
	e := newEnv(t, backendsYAML+"tenant: {api_key: true, cache_salt: true}\n")
	st, _ := e.open(t)
	send(t, st, reqHeaders("POST", chatPath, false, duplex, "content-type", "application/json",
		"x-session-affinity", "s1", "authorization", "Bearer sk-secret-key-1"), reqBody(`{"model":"m"}`, true))
	recv(t, st)
	b := recv(t, st).GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody()
	var v map[string]any
	require.NoError(t, json.Unmarshal(b, &v))
	assert.NotEmpty(t, v["cache_salt"], "the forwarded body carries the tenant's cache_salt")
	assert.NotContains(t, scrape(t, e.g), "sk-secret-key-1")
}

func TestHealthService(t *testing.T) {
	e := newEnv(t, "")
	hc := healthpb.NewHealthClient(e.conn)
	for _, svc := range []string{extproc.HealthLiveness, extproc.HealthReadiness, extproc.HealthExtProc} {
		r, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc})
		require.NoError(t, err, svc)
		assert.Equal(t, healthpb.HealthCheckResponse_SERVING, r.GetStatus(), svc)
	}
}

// Health comes from the gateway's own prober: a backend whose health path fails is not
// picked.
func TestHealthFromProber(t *testing.T) {
	var bad atomic.Bool
	mk := func(fail *atomic.Bool) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if fail != nil && fail.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusOK)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	sick, ok1, ok2 := mk(&bad), mk(nil), mk(nil)
	ticks := make(chan time.Time)
	e := newEnv(t, "backends:\n  - {id: sick, url: \""+sick.URL+"\"}\n  - {id: ok1, url: \""+ok1.URL+"\"}\n  - {id: ok2, url: \""+ok2.URL+"\"}\n"+
		"health: {enabled: true, failure_threshold: 1, success_threshold: 1}\n", gateway.WithProbeTicks(ticks))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.g.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	bad.Store(true)
	ticks <- time.Now()
	ticks <- time.Now() // the second send returns once the first round has finished
	require.Eventually(t, func() bool { return e.g.Scheduler().Health().State("sick") == health.Down }, 5*time.Second, time.Millisecond)
	for i := range 30 {
		st, _ := e.open(t)
		send(t, st, reqHeaders("GET", "/v1/models", true, duplex, "x-session-id", fmt.Sprint("s", i)))
		ep := metadataEndpoint(recv(t, st))
		assert.NotEqual(t, e.endpoints["sick"], ep)
	}
}

// The data plane's served-endpoint metadata is compared with the pick.
func TestServedElsewhere(t *testing.T) {
	e := newEnv(t, "")
	for _, tt := range []struct {
		name   string
		served func(picked string) string
		want   string
	}{
		{"served where picked", func(p string) string { return p }, "agentserve_extproc_served_elsewhere_total 0"},
		{"served elsewhere", func(string) string { return "192.0.2.7:8000" }, "agentserve_extproc_served_elsewhere_total 1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st, _ := e.open(t)
			send(t, st, reqHeaders("GET", "/v1/models", true, duplex, "x-session-id", "s1"))
			picked := metadataEndpoint(recv(t, st))
			rh := respHeaders(true)
			s, _ := structpb.NewStruct(map[string]any{extproc.ServedKey: tt.served(picked)})
			rh.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{extproc.MetadataNamespace: s}}
			send(t, st, rh)
			recv(t, st)
			assert.Contains(t, scrape(t, e.g), tt.want)
		})
	}
}

// A backend URL with a host name is refused at start, naming the backend and the key:
// Envoy's ORIGINAL_DST cluster needs ip:port.
func TestHostNameBackendRefused(t *testing.T) {
	tests := []struct {
		name, url string
		ok        bool
	}{
		{"host name", "http://localhost:18101", false},
		{"host name without port", "http://vllm.internal", false},
		{"IPv4", "http://127.0.0.1:18101", true},
		{"IPv6", "http://[::1]:18101", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := gateway.ParseConfig([]byte("backends:\n  - {id: b0, url: \"http://10.0.0.1:8000\"}\n  - {id: v1, url: \"" + tt.url + "\"}\n"))
			require.NoError(t, err)
			g, err := gateway.New(cfg)
			require.NoError(t, err)
			defer g.Close()
			_, err = extproc.New(g)
			if tt.ok {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, extproc.ErrEndpointHost)
			assert.ErrorContains(t, err, `backends[1] (id "v1") url`)
		})
	}
}
