package main

import (
	"fmt"
	"time"
)

// ServiceModel turns a request into simulated engine time on one backend:
//
//	service = Overhead + PrefillPerToken * uncached prompt tokens + DecodePerToken * output tokens
//
// Each backend is a single FIFO server: a request starts when the previous one finishes
// (or on arrival if the backend is idle) and its latency is queueing wait + service.
// "Service" is the request's share of a continuously batching engine, so DecodePerToken
// is an amortised cost (engine time per output token at full batch), not the
// per-token latency one client sees. Cached prompt tokens cost nothing.
//
// The constants are plausible, not measured: only ratios between policies replayed under
// the same model mean anything; absolute latencies do not.
type ServiceModel struct {
	Overhead        time.Duration // per request
	PrefillPerToken time.Duration // per uncached prompt token
	DecodePerToken  time.Duration // per output token (amortised over the batch)
}

// DefaultModel is the model used by the command: prefill at 1/60 µs = ~16,700 uncached
// tokens/s, decode at ~2,000 output tokens/s of engine throughput, 20 ms per request.
// On the Mooncake conversation trace it puts 8 backends at roughly half load.
var DefaultModel = ServiceModel{
	Overhead:        20 * time.Millisecond,
	PrefillPerToken: 60 * time.Microsecond,
	DecodePerToken:  500 * time.Microsecond,
}

// Service returns the engine time of one request.
func (m ServiceModel) Service(uncachedTokens, outputTokens int) time.Duration {
	return m.Overhead + time.Duration(uncachedTokens)*m.PrefillPerToken +
		time.Duration(outputTokens)*m.DecodePerToken
}

// Cluster is the set of simulated backends of one replay. Policies read it through
// Len, ID, Up, Outstanding and CachedPrefix; the replay loop mutates it. Not safe for
// concurrent use.
type Cluster struct {
	model    ServiceModel
	now      time.Duration // trace time of the request being routed
	backends []simBackend
}

type simBackend struct {
	id        string
	up        bool
	cache     *prefixCache
	busyUntil time.Duration // trace time at which the FIFO queue drains
	work      time.Duration // total service time served
	requests  int
}

// NewCluster builds n backends named "backend-0" … with caches of cacheBlocks blocks.
func NewCluster(n, cacheBlocks int, model ServiceModel) *Cluster {
	c := &Cluster{model: model, backends: make([]simBackend, n)}
	for i := range c.backends {
		c.backends[i] = simBackend{id: BackendID(i), up: true, cache: newPrefixCache(cacheBlocks)}
	}
	return c
}

// BackendID names backend i.
func BackendID(i int) string { return fmt.Sprintf("backend-%d", i) }

// Len returns the number of backends (up or down).
func (c *Cluster) Len() int { return len(c.backends) }

// Now returns the trace time of the request being routed.
func (c *Cluster) Now() time.Duration { return c.now }

// Up reports whether backend i is up.
func (c *Cluster) Up(i int) bool { return c.backends[i].up }

// Outstanding returns the work queued on backend i at the current time (the remaining
// service time of every request dispatched to it).
func (c *Cluster) Outstanding(i int) time.Duration {
	return max(0, c.backends[i].busyUntil-c.now)
}

// CachedPrefix returns how many leading blocks of blocks backend i holds, without
// touching its LRU order.
func (c *Cluster) CachedPrefix(i int, blocks []int64) int {
	return c.backends[i].cache.Peek(blocks)
}

// serve dispatches r to backend i at the current time and returns the reused prompt
// tokens and the latency. The cache is updated at dispatch (the next turn of a session
// arrives after this one completes in real traffic).
func (c *Cluster) serve(i int, r *Request) (reused int, latency time.Duration) {
	b := &c.backends[i]
	k := b.cache.Access(r.Blocks)
	reused = r.PrefixTokens(k)
	svc := c.model.Service(r.InputTokens-reused, r.OutputTokens)
	start := max(c.now, b.busyUntil)
	b.busyUntil = start + svc
	b.work += svc
	b.requests++
	return reused, b.busyUntil - c.now
}

// setUp marks backend i up or down; going down drops its cache (a restarted server comes
// back cold). Requests already queued on it still complete (simplification).
func (c *Cluster) setUp(i int, up bool) {
	b := &c.backends[i]
	if b.up && !up {
		b.cache.Reset()
	}
	b.up = up
}
