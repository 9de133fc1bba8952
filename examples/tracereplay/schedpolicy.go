package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
)

// traceEpoch is the wall time the fake clock shows at trace time 0 (any fixed instant).
var traceEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// schedulerPolicy routes through the real affinity.Scheduler: sticky HRW with a TTL
// binding table, on a fake clock set to the trace timestamp of each request, so the TTL
// runs in trace time. Backend outages reach it through OnBackendDown / OnBackendUp.
type schedulerPolicy struct {
	sched    *affinity.Scheduler
	clock    *affinitytest.Clock
	backends []affinity.Backend
	index    map[string]int // backend ID -> cluster index
}

func newSchedulerPolicy(n int, ttl time.Duration) (Policy, error) {
	p := &schedulerPolicy{clock: affinitytest.NewClock(traceEpoch), index: make(map[string]int, n)}
	sched, err := affinity.New(affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(int64(ttl / time.Second))},
		affinity.WithClock(p.clock))
	if err != nil {
		return nil, fmt.Errorf("tracereplay: scheduler: %w", err)
	}
	p.sched = sched
	for i := range n {
		b, err := affinity.NewBackend(BackendID(i), "", 1)
		if err != nil {
			return nil, fmt.Errorf("tracereplay: scheduler backend %d: %w", i, err)
		}
		p.backends = append(p.backends, b)
		p.index[b.ID()] = i
	}
	return p, nil
}

func (*schedulerPolicy) Name() string { return "scheduler" }

// Route passes every backend as a candidate; the Scheduler's own health set (fed by
// BackendDown/BackendUp) excludes the down ones.
func (p *schedulerPolicy) Route(t Turn, c *Cluster) (Decision, error) {
	p.clock.Set(traceEpoch.Add(c.Now()))
	b, hit, err := p.sched.SelectBackend(t.Session, "", p.backends)
	if errors.Is(err, affinity.ErrNoEligibleBackend) {
		return Decision{}, fmt.Errorf("%w: %w", ErrNoBackendUp, err)
	}
	if err != nil {
		return Decision{}, err
	}
	return Decision{Backend: p.index[b.ID()], Hit: hit, ReportsHit: true}, nil
}

func (p *schedulerPolicy) BackendDown(i int, now time.Duration) {
	p.clock.Set(traceEpoch.Add(now))
	p.sched.OnBackendDown(BackendID(i))
}

func (p *schedulerPolicy) BackendUp(i int, now time.Duration) {
	p.clock.Set(traceEpoch.Add(now))
	p.sched.OnBackendUp(BackendID(i))
}

// Stats returns the Scheduler's counters (for tests and the report).
func (p *schedulerPolicy) Stats() affinity.Stats { return p.sched.Stats() }
