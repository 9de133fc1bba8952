package main

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrBadEvent is returned by ParseEvents for a malformed -down specification.
var ErrBadEvent = errors.New("tracereplay: bad backend event")

// Event takes backend Backend down at trace time Down and, if Up > Down, back up at Up
// (Up == 0: it stays down).
type Event struct {
	Backend  int
	Down, Up time.Duration
}

// ParseEvents parses a comma-separated list of "INDEX:DOWN-UP" items, e.g.
// "2:600s-900s,5:20m-" (backend 2 down from 600 s to 900 s of trace time; backend 5 down
// from 20 min on). Indices must be in [0, backends).
func ParseEvents(spec string, backends int) ([]Event, error) {
	var out []Event
	for item := range strings.SplitSeq(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		idx, span, ok := strings.Cut(item, ":")
		from, to, ok2 := strings.Cut(span, "-")
		if !ok || !ok2 {
			return nil, fmt.Errorf("%w: %q: want INDEX:DOWN-UP", ErrBadEvent, item)
		}
		i, err := strconv.Atoi(idx)
		if err != nil || i < 0 || i >= backends {
			return nil, fmt.Errorf("%w: %q: backend index not in [0,%d)", ErrBadEvent, item, backends)
		}
		ev := Event{Backend: i}
		if ev.Down, err = time.ParseDuration(from); err != nil || ev.Down < 0 {
			return nil, fmt.Errorf("%w: %q: bad down time", ErrBadEvent, item)
		}
		if to != "" {
			if ev.Up, err = time.ParseDuration(to); err != nil || ev.Up <= ev.Down {
				return nil, fmt.Errorf("%w: %q: up time must be a duration after the down time", ErrBadEvent, item)
			}
		}
		out = append(out, ev)
	}
	return out, nil
}

// ReplayConfig is the simulated cluster of one replay.
type ReplayConfig struct {
	Backends    int
	CacheBlocks int // per backend
	Model       ServiceModel
	Events      []Event
}

// Result is what one policy did on one trace.
type Result struct {
	Policy       string
	Requests     int
	InputTokens  int64
	ReusedTokens int64 // prompt tokens served from a backend's prefix cache
	// Continuing is the number of continuing turns (requests with a previous turn).
	Continuing int
	// SameBackend counts continuing turns routed to the backend that served the
	// session's previous turn.
	SameBackend int
	// ReportsHit: the policy reports its own affinity hits (the Scheduler); Hits and
	// Misses are its counts over all requests.
	ReportsHit   bool
	Hits, Misses int
	Work         []time.Duration // service time per backend
	Latencies    []time.Duration // per request, sorted ascending
}

// HitRatio is reused / input prompt tokens.
func (r *Result) HitRatio() float64 {
	if r.InputTokens == 0 {
		return 0
	}
	return float64(r.ReusedTokens) / float64(r.InputTokens)
}

// AffinityRate is the share of continuing turns that were affinity hits: for a policy that
// reports its own hits (the Scheduler) its hit count, otherwise the turns routed to the
// backend that served the session's previous turn; both over the continuing turns (a
// first turn can never hit). NaN when there is no continuing turn.
func (r *Result) AffinityRate() float64 {
	if r.Continuing == 0 {
		return math.NaN()
	}
	if r.ReportsHit {
		return float64(r.Hits) / float64(r.Continuing)
	}
	return float64(r.SameBackend) / float64(r.Continuing)
}

// WorkImbalance is max / mean service time over backends (1 = perfectly even).
func (r *Result) WorkImbalance() float64 {
	var sum, hi time.Duration
	for _, w := range r.Work {
		sum += w
		hi = max(hi, w)
	}
	if sum == 0 {
		return math.NaN()
	}
	return float64(hi) * float64(len(r.Work)) / float64(sum)
}

// Percentile returns the nearest-rank q-quantile (0 < q <= 1) of the latencies.
func (r *Result) Percentile(q float64) time.Duration {
	n := len(r.Latencies)
	if n == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(n))) - 1
	return r.Latencies[min(max(i, 0), n-1)]
}

type transition struct {
	at      time.Duration
	backend int
	up      bool
}

// Replay routes every request of reqs (sorted by time) through p over a fresh simulated
// cluster and measures the result. sessionIDs[i] is the session ID of request i and
// sess gives the previous turn of each request. Backend events are applied just before
// the first request at or after their time. progress, if not nil, is called with the
// number of requests done so far every 256 requests and at the end.
func Replay(reqs []Request, sess *Sessions, sessionIDs []string, p Policy, cfg ReplayConfig, progress func(done int)) (*Result, error) {
	c := NewCluster(cfg.Backends, cfg.CacheBlocks, cfg.Model)
	var trans []transition
	for _, ev := range cfg.Events {
		trans = append(trans, transition{at: ev.Down, backend: ev.Backend})
		if ev.Up > ev.Down {
			trans = append(trans, transition{at: ev.Up, backend: ev.Backend, up: true})
		}
	}
	slices.SortStableFunc(trans, func(a, b transition) int { return cmp.Compare(a.at, b.at) })
	listener, _ := p.(healthListener)
	served, _ := p.(servedListener)

	res := &Result{Policy: p.Name(), Requests: len(reqs), Latencies: make([]time.Duration, 0, len(reqs))}
	servedBy := make([]int, len(reqs))
	for i := range reqs {
		r := &reqs[i]
		c.now = time.Duration(r.Timestamp) * time.Millisecond
		for len(trans) > 0 && trans[0].at <= c.now {
			t := trans[0]
			trans = trans[1:]
			if c.Up(t.backend) == t.up {
				continue
			}
			c.setUp(t.backend, t.up)
			if listener != nil {
				if t.up {
					listener.BackendUp(t.backend, t.at)
				} else {
					listener.BackendDown(t.backend, t.at)
				}
			}
		}
		d, err := p.Route(Turn{Index: i, Req: r, Session: sessionIDs[i]}, c)
		if err != nil {
			return nil, fmt.Errorf("%s: request %d at %v: %w", p.Name(), i, c.now, err)
		}
		if d.Backend < 0 || d.Backend >= c.Len() || !c.Up(d.Backend) {
			return nil, fmt.Errorf("%s: request %d: routed to unusable backend %d", p.Name(), i, d.Backend)
		}
		servedBy[i] = d.Backend
		reused, lat := c.serve(d.Backend, r)
		if served != nil {
			served.Served(Turn{Index: i, Req: r, Session: sessionIDs[i]}, d.Backend, reused, lat)
		}
		res.InputTokens += int64(r.InputTokens)
		res.ReusedTokens += int64(reused)
		res.Latencies = append(res.Latencies, lat)
		if prev := sess.Prev[i]; prev >= 0 {
			res.Continuing++
			if servedBy[prev] == d.Backend {
				res.SameBackend++
			}
		}
		if d.ReportsHit {
			res.ReportsHit = true
			if d.Hit {
				res.Hits++
			} else {
				res.Misses++
			}
		}
		if progress != nil && (i+1)%256 == 0 {
			progress(i + 1)
		}
	}
	if progress != nil {
		progress(len(reqs))
	}
	for i := range c.backends {
		res.Work = append(res.Work, c.backends[i].work)
	}
	slices.Sort(res.Latencies)
	return res, nil
}

// SessionIDs names the sessions "s0", "s1", … per request.
func SessionIDs(s *Sessions) []string {
	names := make([]string, s.Count)
	for i := range names {
		names[i] = "s" + strconv.Itoa(i)
	}
	out := make([]string, len(s.Of))
	for i, sid := range s.Of {
		out[i] = names[sid]
	}
	return out
}
