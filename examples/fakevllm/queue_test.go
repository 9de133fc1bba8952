package fakevllm_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/fakevllm"
)

func TestQueueFIFOAndLimit(t *testing.T) {
	g := newGate()
	// Decode 1s per token (before the gate), prefill negligible: decode calls identify requests.
	srv, ts := start(t, fakevllm.Config{MaxConcurrent: 1, PrefillPerToken: time.Nanosecond, DecodePerToken: time.Second},
		fakevllm.WithSleep(g.sleep))

	var wg sync.WaitGroup
	results := make([]completion, 3)
	send := func(i int) {
		wg.Go(func() {
			results[i] = chat(t, ts.URL, map[string]any{"messages": msgs("user", "req"), "max_tokens": i + 1})
		})
	}
	send(0)
	require.Eventually(t, func() bool { return len(g.recorded()) == 1 }, 5*time.Second, time.Millisecond)
	send(1)
	require.Eventually(t, func() bool { return srv.Stats().Waiting == 1 }, 5*time.Second, time.Millisecond)
	send(2)
	require.Eventually(t, func() bool { return srv.Stats().Waiting == 2 }, 5*time.Second, time.Millisecond)

	st := srv.Stats()
	assert.Equal(t, 1, st.Running)
	assert.Len(t, g.recorded(), 1, "queued requests must not start")
	require.NoError(t, testutil.GatherAndCompare(srv.Registry(), strings.NewReader(`
# HELP vllm:num_requests_running [fakevllm simulator, not vLLM] Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{backend="fakevllm",model_name="fake-model"} 1
# HELP vllm:num_requests_waiting [fakevllm simulator, not vLLM] Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{backend="fakevllm",model_name="fake-model"} 2
`), "vllm:num_requests_running", "vllm:num_requests_waiting"))

	close(g.open)
	wg.Wait()
	var decodes []time.Duration
	for _, d := range g.recorded() {
		if d >= time.Second {
			decodes = append(decodes, d)
		}
	}
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}, decodes, "served in arrival order")
	for i, r := range results {
		assert.Equal(t, i+1, r.Usage.CompletionTokens)
	}
	st = srv.Stats()
	assert.Zero(t, st.Running)
	assert.Zero(t, st.Waiting)
	assert.Equal(t, uint64(3), st.Completed)
}

func TestCancellationFreesSlotAndQueue(t *testing.T) {
	g := newGate()
	srv, ts := start(t, fakevllm.Config{MaxConcurrent: 2}, fakevllm.WithSleep(g.sleep))

	var wg sync.WaitGroup
	ctxs := make([]context.CancelFunc, 3)
	for i := range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		ctxs[i] = cancel
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/chat/completions",
				strings.NewReader(`{"messages":[{"role":"user","content":"x"}]}`))
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
		want := i + 1
		require.Eventually(t, func() bool { st := srv.Stats(); return st.Running+st.Waiting == want },
			5*time.Second, time.Millisecond)
	}
	st := srv.Stats()
	require.Equal(t, 2, st.Running)
	require.Equal(t, 1, st.Waiting)

	ctxs[2]() // the queued one leaves the queue
	require.Eventually(t, func() bool { return srv.Stats().Waiting == 0 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, 2, srv.Stats().Running)

	ctxs[0]() // a running one stops and frees its slot
	ctxs[1]()
	require.Eventually(t, func() bool { return srv.Stats().Running == 0 }, 5*time.Second, time.Millisecond)
	wg.Wait()
	st = srv.Stats()
	assert.Equal(t, uint64(3), st.Cancelled)
	assert.Zero(t, st.Completed)
	close(g.open)

	// The server still works afterwards.
	c := chat(t, ts.URL, map[string]any{"messages": msgs("user", "again")})
	assert.Equal(t, fakevllm.DefaultMaxTokens, c.Usage.CompletionTokens)
}

func TestTimeScaleAppliedToSleeps(t *testing.T) {
	var mu sync.Mutex
	var got []time.Duration
	sleep := func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		got = append(got, d)
		mu.Unlock()
		return nil
	}
	_, ts := start(t, fakevllm.Config{BlockTokens: 4, TimeScale: 0.5, PrefillPerToken: 2 * time.Millisecond, DecodePerToken: 10 * time.Millisecond},
		fakevllm.WithSleep(sleep))
	m := msgs("system", strings.Repeat("a", 200), "user", "hi") // 71 tokens
	chat(t, ts.URL, map[string]any{"messages": m, "max_tokens": 3})
	chat(t, ts.URL, map[string]any{"messages": m, "max_tokens": 3}) // 68 cached -> 3 uncached
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []time.Duration{
		71 * time.Millisecond, 15 * time.Millisecond, // cold prefill 71*2ms*0.5, decode 3*10ms*0.5
		3 * time.Millisecond, 15 * time.Millisecond, // warm prefill 3*2ms*0.5
	}, got)
}
