package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentserve/sessionaffinity/examples/fakevllm"
)

// turnResult is one request of one session's turn.
type turnResult struct {
	session int
	turn    int
	backend string // X-Fakevllm-Backend; "" on failure
	cached  int    // usage.prompt_tokens_details.cached_tokens
	ok      bool   // 200 and a decodable body
	lat     time.Duration
}

// agentLoad drives sessions through turns in rounds: in round r every session sends its
// turn r (conc at a time); between rounds betweenRounds(r) runs (failover and reload
// steps). atDone, when set, runs once in its own goroutine as soon as the given number
// of requests have completed (to kill a backend while requests are in flight).
type agentLoad struct {
	target        string
	sessions      int
	turns         int
	conc          int
	promptBytes   int
	betweenRounds func(round int)
	atDone        int
	atDoneFn      func()
}

func newClient(conc int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = conc * 2
	t.MaxIdleConns = conc * 4
	return &http.Client{Transport: t, Timeout: 30 * time.Second}
}

// run returns results[session][turn].
func (l agentLoad) run(ctx context.Context, runID string) [][]turnResult {
	client := newClient(l.conc)
	defer client.CloseIdleConnections()
	res := make([][]turnResult, l.sessions)
	for s := range res {
		res[s] = make([]turnResult, l.turns)
	}
	// Warm-up, not measured: every proxy starts its connections to the backends (and the
	// gateway its runtime) before the first measured turn.
	var wg0 sync.WaitGroup
	for w := range l.conc {
		wg0.Go(func() {
			for i := range 5 {
				_ = l.turn(ctx, client, runID+"-warmup", 1000+w*5+i, 0)
			}
		})
	}
	wg0.Wait()
	var done atomic.Int64
	var fired sync.Once
	for round := range l.turns {
		jobs := make(chan int)
		var wg sync.WaitGroup
		for range l.conc {
			wg.Go(func() {
				for s := range jobs {
					res[s][round] = l.turn(ctx, client, runID, s, round)
					if l.atDoneFn != nil && done.Add(1) == int64(l.atDone) {
						fired.Do(func() { go l.atDoneFn() })
					}
				}
			})
		}
		for s := range l.sessions {
			jobs <- s
		}
		close(jobs)
		wg.Wait()
		if l.betweenRounds != nil {
			l.betweenRounds(round)
		}
	}
	return res
}

// systemPrompt is unique per session (so a cold turn has nothing cached anywhere).
func systemPrompt(runID string, session, size int) string {
	head := fmt.Sprintf("You are agent %s-%d. Tools: read_file, write_file, run_tests. ", runID, session)
	return head + strings.Repeat("Follow the repository conventions carefully. ", max(0, size-len(head))/45)
}

func (l agentLoad) turn(ctx context.Context, client *http.Client, runID string, s, turn int) turnResult {
	msgs := []map[string]string{{"role": "system", "content": systemPrompt(runID, s, l.promptBytes)}}
	for t := range turn {
		msgs = append(msgs,
			map[string]string{"role": "user", "content": fmt.Sprintf("step %d: run the tests", t)},
			map[string]string{"role": "assistant", "content": fmt.Sprintf("step %d: tests pass", t)})
	}
	msgs = append(msgs, map[string]string{"role": "user", "content": fmt.Sprintf("step %d: run the tests", turn)})
	body, _ := json.Marshal(map[string]any{"model": "m", "max_tokens": 4, "messages": msgs})
	r := turnResult{session: s, turn: turn}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, l.target+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-ID", fmt.Sprintf("%s-session-%d", runID, s))
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		r.lat = time.Since(start)
		return r
	}
	defer resp.Body.Close()
	var out struct {
		Usage struct {
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	derr := json.NewDecoder(resp.Body).Decode(&out)
	r.lat = time.Since(start)
	r.ok = resp.StatusCode == http.StatusOK && derr == nil
	if r.ok {
		r.backend = resp.Header.Get(fakevllm.HeaderBackend)
		r.cached = out.Usage.Details.Cached
	}
	return r
}

// percentile returns the p-th percentile (0..100) of ds (nearest rank).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// overheadLoad sends n small requests (sessions cycling) with conc workers and returns
// the wall time and every latency; failed requests are counted.
func overheadLoad(ctx context.Context, target string, conc, n, sessions int) (time.Duration, []time.Duration, int) {
	client := newClient(conc)
	defer client.CloseIdleConnections()
	body := []byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"ping"}]}`)
	lats := make([]time.Duration, n)
	var next atomic.Int64
	var failed atomic.Int64
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("overhead-session-%d", i)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, target+"/v1/chat/completions", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Session-ID", ids[i%sessions])
				t0 := time.Now()
				resp, err := client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				lats[i] = time.Since(t0)
				if err != nil || resp.StatusCode != http.StatusOK {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), lats, int(failed.Load())
}
