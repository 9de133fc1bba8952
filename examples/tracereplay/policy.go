package main

import (
	"errors"

	"fmt"
	"github.com/agentserve/sessionaffinity/affinity"
	"math/rand/v2"
	"strings"
	"time"
)

// ErrNoBackendUp is returned when a request arrives while every backend is down.
var ErrNoBackendUp = errors.New("tracereplay: no backend up")

// ErrUnknownPolicy is returned for a policy name that is not in PolicyNames.
var ErrUnknownPolicy = errors.New("tracereplay: unknown policy")

// Turn is one request as a policy sees it.
type Turn struct {
	Index   int // position in the trace
	Req     *Request
	Session string // reconstructed session ID, e.g. "s42"
}

// Decision is a policy's routing choice.
type Decision struct {
	Backend int
	// Hit is the policy's own affinity hit flag; meaningful only when ReportsHit.
	Hit        bool
	ReportsHit bool
}

// Policy routes one request to a backend. Policies must skip backends that are down.
type Policy interface {
	Name() string
	Route(t Turn, c *Cluster) (Decision, error)
}

// healthListener is implemented by policies that keep their own view of backend health
// (the Scheduler); the replay calls it at the event's trace time.
type healthListener interface {
	BackendDown(i int, now time.Duration)
	BackendUp(i int, now time.Duration)
}

// PolicyConfig is what policy constructors need.
type PolicyConfig struct {
	Backends int
	Seed     uint64        // random policy
	TTL      time.Duration // Scheduler sticky TTL, trace time
	Global   []int64       // global prefix ignored by the cache-aware reference
	// Load is the load-awareness block of the load-aware policy (zero: RecommendedLoad;
	// a zero BalanceFactor or nil SpillCostWeight: DefaultBalanceFactor,
	// DefaultSpillCostWeight).
	Load affinity.LoadConfig
}

// PolicyNames lists the policies in report order.
var PolicyNames = []string{"random", "round-robin", "least-loaded", "hrw", "scheduler", "load-aware", "cache-aware"}

// NewPolicy builds the named policy.
func NewPolicy(name string, cfg PolicyConfig) (Policy, error) {
	switch name {
	case "random":
		return &randomPolicy{rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed))}, nil
	case "round-robin":
		return &roundRobin{}, nil
	case "least-loaded":
		return &leastLoaded{}, nil
	case "cache-aware":
		return newCacheAware(cfg.Global), nil
	case "hrw":
		return newHRWPolicy(cfg.Backends)
	case "scheduler":
		return newSchedulerPolicy(cfg.Backends, cfg.TTL)
	case "load-aware":
		load := cfg.Load
		if load == (affinity.LoadConfig{}) {
			load = RecommendedLoad()
		}
		if load.BalanceFactor == 0 {
			load.BalanceFactor = DefaultBalanceFactor
		}
		if load.SpillCostWeight == nil {
			load.SpillCostWeight = affinity.SpillWeight(DefaultSpillCostWeight)
		}
		return newLeasePolicy("load-aware", cfg.Backends, cfg.TTL, load)
	}
	return nil, fmt.Errorf("%w: %q (known: %s)", ErrUnknownPolicy, name, strings.Join(PolicyNames, ", "))
}

// randomPolicy picks a uniformly random up backend from a seeded PCG stream.
type randomPolicy struct{ rng *rand.Rand }

func (*randomPolicy) Name() string { return "random" }

func (p *randomPolicy) Route(_ Turn, c *Cluster) (Decision, error) {
	up := 0
	for i := range c.Len() {
		if c.Up(i) {
			up++
		}
	}
	if up == 0 {
		return Decision{}, ErrNoBackendUp
	}
	k := p.rng.IntN(up)
	for i := range c.Len() {
		if c.Up(i) {
			if k == 0 {
				return Decision{Backend: i}, nil
			}
			k--
		}
	}
	panic("unreachable")
}

// roundRobin cycles through the backends, skipping down ones.
type roundRobin struct{ next int }

func (*roundRobin) Name() string { return "round-robin" }

func (p *roundRobin) Route(_ Turn, c *Cluster) (Decision, error) {
	n := c.Len()
	for j := range n {
		i := (p.next + j) % n
		if c.Up(i) {
			p.next = (i + 1) % n
			return Decision{Backend: i}, nil
		}
	}
	return Decision{}, ErrNoBackendUp
}

// rotor breaks ties between equally loaded backends: the scan starts at a position that
// advances by one on every call, so ties go to the first tied backend at or after it.
type rotor struct{ next int }

// leastLoaded returns the up backend with the least outstanding work among those
// accepted by ok (nil = all), ties broken by the rotor; -1 if none.
func (r *rotor) leastLoaded(c *Cluster, ok func(i int) bool) int {
	n := c.Len()
	best, bestW := -1, time.Duration(0)
	for j := range n {
		i := (r.next + j) % n
		if !c.Up(i) || (ok != nil && !ok(i)) {
			continue
		}
		if w := c.Outstanding(i); best < 0 || w < bestW {
			best, bestW = i, w
		}
	}
	r.next = (r.next + 1) % n
	return best
}

// leastLoaded routes to the up backend with the least outstanding work.
type leastLoaded struct{ rotor rotor }

func (*leastLoaded) Name() string { return "least-loaded" }

func (p *leastLoaded) Route(_ Turn, c *Cluster) (Decision, error) {
	if i := p.rotor.leastLoaded(c, nil); i >= 0 {
		return Decision{Backend: i}, nil
	}
	return Decision{}, ErrNoBackendUp
}

// cacheAware is the reference: it routes to the up backend holding the longest cached
// prefix of the request, not counting the global prefix (which every backend holds, so
// counting it would collapse all traffic onto one backend); ties — including "nobody
// holds anything beyond the global prefix" — go to the least loaded (then the rotor). It
// peeks at every cache, which a real gateway cannot do cheaply.
type cacheAware struct {
	rotor  rotor
	ignore map[int64]bool
	scores []int
}

func newCacheAware(global []int64) *cacheAware {
	p := &cacheAware{ignore: make(map[int64]bool, len(global))}
	for _, h := range global {
		p.ignore[h] = true
	}
	return p
}

func (*cacheAware) Name() string { return "cache-aware" }

func (p *cacheAware) Route(t Turn, c *Cluster) (Decision, error) {
	p.scores = p.scores[:0]
	best := -1
	for i := range c.Len() {
		s := -1
		if c.Up(i) {
			k := c.CachedPrefix(i, t.Req.Blocks)
			s = 0
			for _, h := range t.Req.Blocks[:k] {
				if !p.ignore[h] {
					s++
				}
			}
		}
		p.scores = append(p.scores, s)
		best = max(best, s)
	}
	if best < 0 {
		return Decision{}, ErrNoBackendUp
	}
	i := p.rotor.leastLoaded(c, func(i int) bool { return p.scores[i] == best })
	return Decision{Backend: i}, nil
}
