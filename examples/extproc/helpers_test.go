package extproc_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentserve/sessionaffinity/examples/extproc"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// env is a running endpoint picker on a loopback port and a client connected to it.
type env struct {
	g      *gateway.Gateway
	srv    *extproc.Server
	conn   *grpc.ClientConn
	client extprocv3.ExternalProcessorClient
	// endpoints maps backend id -> ip:port as the picker reports them.
	endpoints map[string]string
}

const backendsYAML = `backends:
  - {id: b0, url: "http://10.0.0.10:8000"}
  - {id: b1, url: "http://10.0.0.11:8000"}
  - {id: b2, url: "http://10.0.0.12"}
`

func newEnv(t *testing.T, yaml string, opts ...gateway.Option) *env {
	t.Helper()
	return newEnvWith(t, yaml, nil, opts...)
}

// newEnvWith is newEnv with options for the picker.
func newEnvWith(t *testing.T, yaml string, popts []extproc.Option, opts ...gateway.Option) *env {
	t.Helper()
	if yaml == "" {
		yaml = backendsYAML
	}
	cfg, err := gateway.ParseConfig([]byte(yaml))
	require.NoError(t, err)
	g, err := gateway.New(cfg, opts...)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	srv, err := extproc.New(g, popts...)
	require.NoError(t, err)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer()
	srv.Register(gs)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		gs.Stop()
		<-done
	})
	e := &env{g: g, srv: srv, conn: conn, client: extprocv3.NewExternalProcessorClient(conn), endpoints: map[string]string{}}
	for _, b := range cfg.Backends {
		host := strings.TrimPrefix(b.URL, "http://")
		if !strings.Contains(host, ":") {
			host += ":80"
		}
		e.endpoints[b.ID] = host
	}
	return e
}

// open starts one ext_proc stream (one HTTP request as Envoy sees it).
func (e *env) open(t *testing.T) (extprocv3.ExternalProcessor_ProcessClient, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := e.client.Process(ctx)
	require.NoError(t, err)
	t.Cleanup(cancel)
	return st, cancel
}

func hv(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, RawValue: []byte(v)} }

// reqHeaders is Envoy's first message: request headers (lower-case keys, pseudo-headers,
// raw_value) plus the protocol configuration of the filter.
func reqHeaders(method, path string, eos bool, mode filterv3.ProcessingMode_BodySendMode, kv ...string) *extprocv3.ProcessingRequest {
	hs := []*corev3.HeaderValue{hv(":method", method), hv(":path", path), hv(":authority", "gw.example"), hv(":scheme", "http")}
	for i := 0; i+1 < len(kv); i += 2 {
		hs = append(hs, hv(strings.ToLower(kv[i]), kv[i+1]))
	}
	return &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: &corev3.HeaderMap{Headers: hs}, EndOfStream: eos}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: mode, ResponseBodyMode: mode},
	}
}

func reqBody(b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}}
}

func respHeaders(eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			hv(":status", "200"), hv("content-type", "text/event-stream")}}, EndOfStream: eos}}}
}

func respBody(b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}}
}

// withSubset adds the data plane's subset hint to a request.
func withSubset(r *extprocv3.ProcessingRequest, endpoints ...string) *extprocv3.ProcessingRequest {
	vals := make([]any, len(endpoints))
	for i, e := range endpoints {
		vals[i] = e
	}
	s, _ := structpb.NewStruct(map[string]any{extproc.SubsetKey: vals})
	r.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{extproc.SubsetNamespace: s}}
	return r
}

// setHeader returns the value a header mutation sets for key ("" if none).
func setHeader(m *extprocv3.HeaderMutation, key string) string {
	for _, h := range m.GetSetHeaders() {
		if h.GetHeader().GetKey() == key {
			if raw := h.GetHeader().GetRawValue(); len(raw) > 0 {
				return string(raw)
			}
			return h.GetHeader().GetValue()
		}
	}
	return ""
}

// metadataEndpoint returns envoy.lb/x-gateway-destination-endpoint of a response.
func metadataEndpoint(r *extprocv3.ProcessingResponse) string {
	return r.GetDynamicMetadata().GetFields()[extproc.MetadataNamespace].GetStructValue().
		GetFields()[extproc.MetadataKeyDestination].GetStringValue()
}

func send(t *testing.T, st extprocv3.ExternalProcessor_ProcessClient, reqs ...*extprocv3.ProcessingRequest) {
	t.Helper()
	for _, r := range reqs {
		require.NoError(t, st.Send(r))
	}
}

func recv(t *testing.T, st extprocv3.ExternalProcessor_ProcessClient) *extprocv3.ProcessingResponse {
	t.Helper()
	r, err := st.Recv()
	require.NoError(t, err)
	return r
}

func scrape(t *testing.T, g *gateway.Gateway) string {
	t.Helper()
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}
