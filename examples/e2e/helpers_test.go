package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
	"github.com/agentserve/sessionaffinity/examples/fakevllm"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// noSleep makes the simulators answer instantly (no time.Sleep anywhere in the tests).
func noSleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// backendServer is one fakevllm on its own listener, so it can be killed and restarted
// on the same address.
type backendServer struct {
	id   string
	sim  *fakevllm.Server
	addr string
	url  string

	mu  sync.Mutex
	srv *http.Server
	wg  sync.WaitGroup
}

func startBackend(t *testing.T, id string) *backendServer {
	t.Helper()
	return startBackendWith(t, fakevllm.Config{ID: id, DefaultMaxTokens: 8}, noSleep)
}

// startBackendWith is startBackend with the simulator's config and wait function.
func startBackendWith(t *testing.T, cfg fakevllm.Config, sleep func(context.Context, time.Duration) error) *backendServer {
	t.Helper()
	id := cfg.ID
	sim, err := fakevllm.New(cfg, fakevllm.WithSleep(sleep))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &backendServer{id: id, sim: sim, addr: ln.Addr().String()}
	b.url = "http://" + b.addr
	b.serve(ln)
	t.Cleanup(b.kill)
	return b
}

func (b *backendServer) serve(ln net.Listener) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.srv = &http.Server{Handler: b.sim}
	srv := b.srv
	b.wg.Go(func() { _ = srv.Serve(ln) })
}

// kill closes the listener and every connection, like a crashed server.
func (b *backendServer) kill() {
	b.mu.Lock()
	srv := b.srv
	b.srv = nil
	b.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
	b.wg.Wait()
}

// killBackend kills backend id and drops the gateway's pooled connections, as a crash
// noticed before the next request would: the tests that use it are about failures on
// fresh connections. A POST written on a pooled connection the backend closed is not
// replayed (it may have reached the backend); TestRetryRules covers that race.
func (c *cluster) killBackend(id string) {
	c.backends[id].kill()
	c.gw.Close()
}

// restart serves again on the same address.
func (b *backendServer) restart(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", b.addr)
	require.NoError(t, err)
	b.serve(ln)
}

// cluster is a gateway over fakevllm backends.
type cluster struct {
	t        *testing.T
	gw       *gateway.Gateway
	url      string
	backends map[string]*backendServer
	recheck  chan time.Time
	client   *http.Client
	clock    *affinitytest.Clock // outlier detection and the scheduler
	logs     *lockedBuffer       // the gateway's log, JSON lines (Info and above)
	records  *logRecords         // the gateway's log records, every level
	ts       *httptest.Server
}

// logRecords is a slog.Handler that keeps every record of every level (attributes added
// with Logger.With and groups are not kept: the gateway adds none).
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}

func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecords) WithGroup(string) slog.Handler      { return h }

// atLeast returns the records of level min or above, as "LEVEL msg attrs" lines.
func (h *logRecords) atLeast(min slog.Level) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.recs {
		if r.Level >= min {
			line := r.Level.String() + " " + r.Message
			r.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
			out = append(out, line)
		}
	}
	return out
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers (the gateway's logger).
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// records returns the logged records whose msg is msg, decoded.
func (b *lockedBuffer) records(msg string) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range bytes.Split(b.buf.Bytes(), []byte("\n")) {
		var rec map[string]any
		if json.Unmarshal(line, &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

func newCluster(t *testing.T, n int, mutate func(*gateway.Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, backends: map[string]*backendServer{}, recheck: make(chan time.Time)}
	cfg := gateway.Config{}
	for i := range n {
		b := startBackend(t, fmt.Sprintf("b%d", i+1))
		c.backends[b.id] = b
		cfg.Backends = append(cfg.Backends, gateway.BackendConfig{ID: b.id, URL: b.url})
	}
	if mutate != nil {
		mutate(&cfg)
	}
	return c.start(cfg)
}

func (c *cluster) start(cfg gateway.Config) *cluster {
	t := c.t
	c.clock = affinitytest.NewClock(time.Unix(1_700_000_000, 0))
	c.logs = &lockedBuffer{}
	c.records = &logRecords{}
	logger := slog.New(slog.NewMultiHandler(slog.NewJSONHandler(c.logs, nil), c.records))
	g, err := gateway.New(cfg, gateway.WithRecheckTicks(c.recheck), gateway.WithProbeTicks(make(chan time.Time)),
		gateway.WithClock(c.clock), gateway.WithLogger(logger))
	require.NoError(t, err)
	c.gw = g
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = g.Run(ctx) })
	ts := httptest.NewServer(g)
	c.url, c.ts = ts.URL, ts
	tr := &http.Transport{}
	c.client = &http.Client{Transport: tr}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		ts.Close()
		cancel()
		wg.Wait()
		g.Close()
	})
	return c
}

type chatResult struct {
	status   int
	header   http.Header
	body     []byte
	meta     gateway.Metadata
	hasMeta  bool
	backend  string
	hit      bool
	fakeFrom string // X-Fakevllm-Backend: which simulator actually answered
	cached   int64
}

type msg struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func (c *cluster) post(path string, headers map[string]string, body []byte) chatResult {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.url+path, bytes.NewReader(body))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.client.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	r := chatResult{status: resp.StatusCode, header: resp.Header, body: data,
		backend: resp.Header.Get(gateway.HeaderBackend), fakeFrom: resp.Header.Get("X-Fakevllm-Backend")}
	r.hit, _ = strconv.ParseBool(resp.Header.Get(gateway.HeaderAffinityHit))
	var parsed struct {
		Meta  *gateway.Metadata `json:"x_agent_serve"`
		Usage struct {
			Details struct {
				Cached int64 `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if json.Unmarshal(data, &parsed) == nil {
		r.cached = parsed.Usage.Details.Cached
		if parsed.Meta != nil {
			r.meta, r.hasMeta = *parsed.Meta, true
		}
	}
	return r
}

// chat sends one turn of a session (sessionID "" sends no session header).
func (c *cluster) chat(sessionID string, msgs []msg) chatResult {
	c.t.Helper()
	body, err := json.Marshal(map[string]any{"model": "fake-model", "messages": msgs, "max_tokens": 8})
	require.NoError(c.t, err)
	h := map[string]string{}
	if sessionID != "" {
		h["X-Session-ID"] = sessionID
	}
	return c.post("/v1/chat/completions", h, body)
}

// session is a multi-turn conversation with a growing history.
type session struct {
	id   string
	msgs []msg
}

func newSession(id string) *session {
	return &session{id: id, msgs: []msg{{Role: "system", Content: "system prompt of " + id + " " + string(bytes.Repeat([]byte("tools and rules "), 64))}}}
}

func (s *session) turn(c *cluster) chatResult {
	c.t.Helper()
	s.msgs = append(s.msgs, msg{Role: "user", Content: fmt.Sprintf("turn %d of %s", len(s.msgs), s.id)})
	r := c.chat(s.id, s.msgs)
	require.Equal(c.t, http.StatusOK, r.status, "session %s: %s", s.id, r.body)
	var resp struct {
		Choices []struct {
			Message msg `json:"message"`
		} `json:"choices"`
	}
	require.NoError(c.t, json.Unmarshal(r.body, &resp))
	require.NotEmpty(c.t, resp.Choices)
	s.msgs = append(s.msgs, resp.Choices[0].Message)
	return r
}

// metrics scrapes the gateway's /metrics with the Prometheus text parser.
func (c *cluster) metrics() map[string]*dto.MetricFamily {
	c.t.Helper()
	resp, err := c.client.Get(c.url + "/metrics")
	require.NoError(c.t, err)
	defer resp.Body.Close()
	require.Equal(c.t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(c.t, err)
	return mf
}

// counter sums the samples of family name whose labels include want.
func counter(mf map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	var total float64
	f, ok := mf[name]
	if !ok {
		return 0
	}
next:
	for _, m := range f.GetMetric() {
		for k, v := range want {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == k && lp.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		total += m.GetCounter().GetValue()
	}
	return total
}

// errorCode decodes an OpenAI-style JSON error body.
func errorCode(t *testing.T, body []byte) (code, message string) {
	t.Helper()
	var e struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &e), "error body must be JSON: %s", body)
	return e.Error.Code, e.Error.Message
}

// gauge returns the value of the sample of family name whose labels include want.
func gauge(mf map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f, ok := mf[name]
	if !ok {
		return -1
	}
next:
	for _, m := range f.GetMetric() {
		for k, v := range want {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == k && lp.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		return m.GetGauge().GetValue()
	}
	return -1
}
