package main

import (
	"container/heap"
	"errors"
	"fmt"
	"time"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
)

// Default load-awareness values of the load-aware policy (the -balance-factor,
// -spill-cost-weight, -cold-cache-ratio, -drain-rate, -retention-guard and
// -min-request-cost flags); the sweep in docs/load-aware.md explains the choice.
const (
	DefaultBalanceFactor   = 1.25
	DefaultSpillCostWeight = 5.0
	DefaultColdCacheRatio  = 0.001
	DefaultDrainRate       = 16000.0 // tokens/s before the first Done; learned after
	DefaultRetentionGuard  = 2.5
	DefaultMinRequestCost  = 4096 // prompt tokens: load.min_request_cost, as in gateway.yaml
)

// RecommendedLoad is the load block the load-aware policy uses by default.
func RecommendedLoad() affinity.LoadConfig {
	return affinity.LoadConfig{BalanceFactor: DefaultBalanceFactor, SpillCostWeight: affinity.SpillWeight(DefaultSpillCostWeight),
		ColdCacheRatio: DefaultColdCacheRatio, DrainTokensPerSecond: DefaultDrainRate, RetentionGuardFactor: DefaultRetentionGuard,
		MinRequestCost: DefaultMinRequestCost}
}

// servedListener is implemented by policies that need to know when and how a request they
// routed was served (the lease policy releases its leases at completion time).
type servedListener interface {
	Served(t Turn, backend, reusedTokens int, latency time.Duration)
}

// leasePolicy drives the real affinity.Scheduler through leases: Acquire per request with
// cost = the request's prompt tokens, and Lease.Done at the request's simulated completion
// time with the usage a vLLM backend would report (prompt and cached prompt tokens). The
// fake clock runs in trace time, so TTLs and load views follow the trace.
type leasePolicy struct {
	name     string
	sched    *affinity.Scheduler
	clock    *affinitytest.Clock
	backends []affinity.Backend
	index    map[string]int
	open     leaseHeap
	last     *affinity.Lease   // the lease of the request just routed
	free     []*affinity.Lease // released leases, for Acquire to fill again
	spills   int
}

func newLeasePolicy(name string, n int, ttl time.Duration, load affinity.LoadConfig) (*leasePolicy, error) {
	p := &leasePolicy{name: name, clock: affinitytest.NewClock(traceEpoch), index: make(map[string]int, n)}
	sched, err := affinity.New(affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(int64(ttl / time.Second)), Load: load},
		affinity.WithClock(p.clock))
	if err != nil {
		return nil, fmt.Errorf("tracereplay: %s: %w", name, err)
	}
	p.sched = sched
	for i := range n {
		b, err := affinity.NewBackend(BackendID(i), "", 1)
		if err != nil {
			return nil, fmt.Errorf("tracereplay: %s backend %d: %w", name, i, err)
		}
		p.backends = append(p.backends, b)
		p.index[b.ID()] = i
	}
	return p, nil
}

func (p *leasePolicy) Name() string { return p.name }

// release ends every lease whose request completed at or before now.
func (p *leasePolicy) release(now time.Duration) {
	for len(p.open) > 0 && p.open[0].end <= now {
		o := heap.Pop(&p.open).(openLease)
		p.clock.Set(traceEpoch.Add(o.end))
		o.lease.Done(affinity.DoneInfo{PromptTokens: o.prompt, CachedPromptTokens: o.cached, CacheReported: true})
		p.free = append(p.free, o.lease)
	}
}

func (p *leasePolicy) Route(t Turn, c *Cluster) (Decision, error) {
	p.release(c.Now())
	p.clock.Set(traceEpoch.Add(c.Now()))
	l := new(affinity.Lease)
	if n := len(p.free); n > 0 {
		l, p.free = p.free[n-1], p.free[:n-1]
	}
	err := p.sched.Acquire(t.Session, "", p.backends, int64(t.Req.InputTokens), l)
	if err != nil {
		p.free = append(p.free, l) // not filled
	}
	if errors.Is(err, affinity.ErrNoEligibleBackend) {
		return Decision{}, fmt.Errorf("%w: %w", ErrNoBackendUp, err)
	}
	if err != nil {
		return Decision{}, err
	}
	if l.Outcome == affinity.OutcomeSpill {
		p.spills++
	}
	p.last = l
	return Decision{Backend: p.index[l.Backend.ID()], Hit: l.AffinityHit, ReportsHit: true}, nil
}

// Served schedules the Done of the request just routed at its completion time.
func (p *leasePolicy) Served(t Turn, _ int, reused int, latency time.Duration) {
	now := time.Duration(t.Req.Timestamp) * time.Millisecond
	heap.Push(&p.open, openLease{end: now + latency, lease: p.last,
		prompt: int64(t.Req.InputTokens), cached: int64(reused)})
	p.last = nil
}

func (p *leasePolicy) BackendDown(i int, now time.Duration) {
	p.release(now)
	p.clock.Set(traceEpoch.Add(now))
	p.sched.OnBackendDown(BackendID(i))
}

func (p *leasePolicy) BackendUp(i int, now time.Duration) {
	p.release(now)
	p.clock.Set(traceEpoch.Add(now))
	p.sched.OnBackendUp(BackendID(i))
}

// finish releases every open lease (the end of the trace).
func (p *leasePolicy) finish() { p.release(1<<63 - 1) }

type openLease struct {
	end            time.Duration
	lease          *affinity.Lease
	prompt, cached int64
}

// leaseHeap orders open leases by completion time.
type leaseHeap []openLease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].end < h[j].end }
func (h leaseHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *leaseHeap) Push(x any)        { *h = append(*h, x.(openLease)) }
func (h *leaseHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
