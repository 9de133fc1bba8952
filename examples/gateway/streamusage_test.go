package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/examples/fakevllm"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// usageBackend is a vLLM-like chat/completions and completions backend: it records each
// request body (and its Content-Length) and answers "stream": true with vLLM's event
// stream, the usage-only chunk included only when the request asks for
// stream_options.include_usage (never with ignore), each event written in pieces of
// split bytes (0: whole) with a flush after each, lines ended by eol; other requests get
// a JSON body. Every usage reports a 4,096-token prompt, 3,968 of it cached.
type usageBackend struct {
	usageShape

	mu     sync.Mutex
	bodies []string
	lens   []int64
}

// usageShape is how a usageBackend writes its streams.
type usageShape struct {
	eol    string
	split  int
	ignore bool
}

const usagePrompt, usageCached = 4096, 3968

func (u *usageBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.bodies, u.lens = append(u.bodies, string(body)), append(u.lens, r.ContentLength)
	u.mu.Unlock()
	var req struct {
		Stream        bool
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if json.Unmarshal(body, &req) != nil {
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":%d}}`,
		usagePrompt, usagePrompt+2, usageCached)
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"cmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}],"usage":`+usage+`}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	asked := req.StreamOptions != nil && req.StreamOptions.IncludeUsage && !u.ignore
	for _, ev := range usageStream(r.URL.Path, asked, u.eol) {
		for len(ev) > 0 {
			n := len(ev)
			if u.split > 0 {
				n = min(n, u.split)
			}
			_, _ = io.WriteString(w, ev[:n])
			w.(http.Flusher).Flush()
			ev = ev[n:]
		}
	}
}

func (u *usageBackend) seen() ([]string, []int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.bodies...), append([]int64(nil), u.lens...)
}

// usageStream is the event stream vLLM sends for path, with the usage-only chunk when
// withUsage, lines ended by eol.
func usageStream(path string, withUsage bool, eol string) []string {
	head, delta := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,`, `"delta":{"content":"%s"}`
	if strings.HasSuffix(path, "/v1/completions") {
		head, delta = `data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,`, `"text":"%s"`
	}
	var evs []string
	for _, tok := range []string{"hel", "lo"} {
		evs = append(evs, head+fmt.Sprintf(delta, tok)+`,"logprobs":null,"finish_reason":null}]}`)
	}
	evs = append(evs, head+fmt.Sprintf(delta, "")+`,"logprobs":null,"finish_reason":"stop"}]}`)
	if withUsage {
		evs = append(evs, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":`+
			fmt.Sprintf(`{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":%d}}}`,
				usagePrompt, usagePrompt+2, usageCached))
	}
	evs = append(evs, "data: [DONE]")
	for i := range evs {
		evs[i] += eol + eol
	}
	return evs
}

// stream_usage: a streaming chat/completions or completions request that does not ask
// for its usage is sent asking for it, the usage-only chunk reaches the lease (the
// second turn, a hit, books its prompt and cached counts) and is not forwarded, so the
// client gets the stream it would have got without the gateway; a request that asks
// itself, or is not streamed, or stream_usage off, is sent byte for byte and its
// response forwarded whole. A backend that ignores the option books nothing.
func TestStreamUsage(t *testing.T) {
	const chat, plain = `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false}`
	asked := `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`
	hit := affinity.TierReuse{PromptTokens: usagePrompt, CachedPromptTokens: usageCached}
	for _, tt := range []struct {
		name      string
		on        bool
		path      string
		body      string
		backend   usageShape
		sent      string // the body the backend gets ("": the client's)
		usageSeen bool   // the client's stream has the usage chunk
		reuse     affinity.TierReuse
	}{
		{name: "asked for the client", on: true, body: chat, sent: asked, reuse: hit},
		{name: "completions", on: true, path: "/v1/completions", body: chat, sent: asked, reuse: hit},
		{name: "CRLF", on: true, body: chat, backend: usageShape{eol: "\r\n"}, sent: asked, reuse: hit},
		{name: "split writes", on: true, body: chat, backend: usageShape{split: 7}, sent: asked, reuse: hit},
		{name: "CRLF split", on: true, body: chat, backend: usageShape{eol: "\r\n", split: 1}, sent: asked, reuse: hit},
		{name: "lone CR", on: true, body: chat, backend: usageShape{eol: "\r"}, sent: asked, reuse: hit},
		{name: "lone CR split", on: true, body: chat, backend: usageShape{eol: "\r", split: 3}, sent: asked, reuse: hit},
		{name: "lone CR, client asked", on: true, body: asked, backend: usageShape{eol: "\r"}, usageSeen: true, reuse: hit},
		{name: "include_usage false", on: true, body: strings.Replace(asked, "true}}", "false}}", 1), sent: asked, reuse: hit},
		{name: "backend ignores it", on: true, body: chat, backend: usageShape{ignore: true}, sent: asked},
		{name: "client asked", on: true, body: asked, usageSeen: true, reuse: hit},
		{name: "not streamed", on: true, body: plain, reuse: hit},
		{name: "off", body: chat},
		{name: "off, client asked", body: asked, usageSeen: true, reuse: hit},
	} {
		t.Run(tt.name, func(t *testing.T) {
			eachServer(t, func(t *testing.T, server string) {
				be := &usageBackend{usageShape: tt.backend}
				if be.eol == "" {
					be.eol = "\n"
				}
				srv := httptest.NewServer(be)
				t.Cleanup(srv.Close)
				cfg := gateway.Config{Health: gateway.HealthConfig{Enabled: new(false)}, StreamUsage: tt.on,
					Backends: []gateway.BackendConfig{{ID: "b0", URL: srv.URL}}}
				g, err := gateway.New(cfg)
				require.NoError(t, err)
				t.Cleanup(g.Close)
				gw := newFront(t, server, g, nil)
				t.Cleanup(gw.Close)
				path := tt.path
				if path == "" {
					path = "/v1/chat/completions"
				}
				for turn := range 2 {
					req, err := http.NewRequest(http.MethodPost, gw.URL+path, strings.NewReader(tt.body))
					require.NoError(t, err)
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("X-Session-ID", "s1")
					resp, err := http.DefaultClient.Do(req)
					require.NoError(t, err)
					got, err := io.ReadAll(resp.Body)
					require.NoError(t, err)
					_ = resp.Body.Close()
					require.Equal(t, http.StatusOK, resp.StatusCode, string(got))
					assert.Equal(t, turn == 1, resp.Header.Get(gateway.HeaderAffinityHit) == "true")
					if !strings.Contains(tt.body, `"stream":true`) {
						assert.Contains(t, string(got), `"usage":`)
						continue
					}
					assert.Equal(t, strings.Join(usageStream(path, tt.usageSeen, be.eol), ""), string(got), "the client's stream")
				}
				bodies, lens := be.seen()
				require.Len(t, bodies, 2)
				want := tt.sent
				if want == "" {
					want = tt.body
				}
				for i := range bodies {
					assert.Equal(t, want, bodies[i], "the body the backend got")
					assert.Equal(t, int64(len(want)), lens[i], "its Content-Length")
				}
				assert.Equal(t, tt.reuse, g.Scheduler().Reuse(""), "the hit's usage booked")
				assert.Zero(t, g.Scheduler().Load("b0").Requests, "every lease released")
			})
		})
	}
}

// A retry resends the body the gateway rewrote: the first attempt's dial fails, the
// request goes to the other backend asking for the usage, and the client's stream has
// no usage chunk.
func TestStreamUsageRetry(t *testing.T) {
	be := &usageBackend{usageShape: usageShape{eol: "\n"}}
	srv := httptest.NewServer(be)
	t.Cleanup(srv.Close)
	var mu sync.Mutex
	attempts := 0
	first := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		mu.Lock()
		attempts++
		n := attempts
		mu.Unlock()
		if n == 1 {
			return nil, errRefused
		}
		out := req.Clone(req.Context())
		out.URL.Host, out.Host = strings.TrimPrefix(srv.URL, "http://"), ""
		return http.DefaultTransport.RoundTrip(out)
	})
	cfg, err := gateway.ParseConfig([]byte("health: {enabled: false}\nstream_usage: true\nbackends:\n" +
		"  - {id: b0, url: \"http://127.0.0.1:9\"}\n  - {id: b1, url: \"http://127.0.0.1:10\"}\n"))
	require.NoError(t, err)
	g, err := gateway.New(cfg, gateway.WithTransport(first))
	require.NoError(t, err)
	t.Cleanup(g.Close)
	body := `{"model":"m","stream":true}`
	rec := do(t, g, "/v1/chat/completions", body, map[string]string{"X-Session-ID": "s1"})
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Equal(t, 2, attempts)
	assert.Equal(t, strings.Join(usageStream("/v1/chat/completions", false, "\n"), ""), rec.Body.String())
	bodies, _ := be.seen()
	assert.Equal(t, []string{`{"model":"m","stream":true,"stream_options":{"include_usage":true}}`}, bodies)
	b := rec.Header().Get(gateway.HeaderBackend)
	assert.Equal(t, affinity.LoadSnapshot{}, g.Scheduler().Load(b), "the lease released")
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Against fakevllm, which sends the usage chunk only when asked (as vLLM does): with
// stream_usage a client that does not ask gets no usage chunk and its second turn (a
// hit) books the prompt and cached tokens; without it, nothing is booked.
func TestStreamUsageFakeVLLM(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream_usage=%v", on), func(t *testing.T) {
			srv, err := fakevllm.New(fakevllm.Config{ID: "v0", DefaultMaxTokens: 3},
				fakevllm.WithSleep(func(ctx context.Context, _ time.Duration) error { return ctx.Err() }))
			require.NoError(t, err)
			ts := httptest.NewServer(srv)
			t.Cleanup(ts.Close)
			g, err := gateway.New(gateway.Config{Health: gateway.HealthConfig{Enabled: new(false)}, StreamUsage: on,
				Backends: []gateway.BackendConfig{{ID: "v0", URL: ts.URL}}})
			require.NoError(t, err)
			t.Cleanup(g.Close)
			body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("run the tests ", 200) + `"}]}`
			for range 2 {
				rec := do(t, g, "/v1/chat/completions", body, map[string]string{"X-Session-ID": "s1"})
				require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
				assert.NotContains(t, rec.Body.String(), `"usage"`, "no usage chunk for a client that did not ask")
				assert.True(t, strings.HasSuffix(rec.Body.String(), "data: [DONE]\n\n"))
			}
			reuse := g.Scheduler().Reuse("")
			assert.Equal(t, on, reuse.PromptTokens > 0, "the hit's usage booked: %+v", reuse)
			assert.Equal(t, on, reuse.CachedPromptTokens > 0, "its cached prefix: %+v", reuse)
		})
	}
}
