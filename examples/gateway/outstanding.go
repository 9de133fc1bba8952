package gateway

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentserve/sessionaffinity/affinity"
)

// Outstanding load across reloads. A lease belongs to the Scheduler that made it, and a
// reload that changes the affinity block replaces the Scheduler while requests are in
// flight on the old one (each request keeps the routing snapshot it started with, and
// its retries and its lease's Done go to that snapshot's Scheduler). So that
// MetricOutstandingRequests and MetricOutstandingCost keep counting those requests until
// they end, the gateway keeps each replaced ("retired") Scheduler while it may still hold
// leases and adds their load to the current Scheduler's at scrape time.
//
// When a retired Scheduler may be dropped: a request pins the Scheduler of the snapshot
// it uses for as long as it can lease on it (ServeHTTP from its start to its end, Decide
// until its lease is taken: pin), and a lease, once taken, shows in the Scheduler's
// load. A retired Scheduler with no pinned request can take no new lease (every new
// request pins the current one), so once it also has no outstanding load it never will:
// it is dropped then (checked at every scrape and every reload; bounded by the requests
// in flight, no leak). Pins are read before the load, in that order. A reload lists the
// Scheduler it replaces before it publishes the new snapshot, so a scrape never misses
// it in between.
//
// Decision: the current Scheduler's load-aware placement (affinity.load) does not see
// the requests started before the reload; it starts from its own leases (and the next
// load report). Seeding it would mean leasing every in-flight request a second time on
// the new Scheduler and ending that lease with the old one, for a few seconds of
// overlap in a rare event.

// schedLife is one Scheduler's use by the routing snapshots built on it (a reload that
// keeps the Scheduler shares it with the new snapshot).
type schedLife struct {
	sched *affinity.Scheduler
	users atomic.Int64 // requests pinning it (Gateway.pin)
	// ids are the backend IDs of every snapshot built on it: the backends its leases can
	// be on. Written by New and Reload while the Scheduler is current (under reloadMu),
	// read only once it is retired (under retiring.mu, taken after the last write).
	ids []string
}

// addIDs adds the backend IDs of rt to l.ids (those it lacks).
func (l *schedLife) addIDs(rt *routing) {
	for _, b := range rt.backends {
		if !slices.Contains(l.ids, b.id) {
			l.ids = append(l.ids, b.id)
		}
	}
}

// busy reports whether l's Scheduler may still lease or hold a lease: a pinned request,
// else outstanding load on one of its backends. Pins first: a request pins before it
// leases, and a retired Scheduler gets no new pin.
func (l *schedLife) busy() bool {
	if l.users.Load() > 0 {
		return true
	}
	for _, id := range l.ids {
		if l.sched.Load(id).Requests > 0 {
			return true
		}
	}
	return false
}

// retiring holds the Schedulers replaced by a reload that are still busy. Safe for
// concurrent use.
type retiring struct {
	mu    sync.Mutex
	lives []*schedLife
}

// add retires l. Reload calls it before the snapshot that replaces l's Scheduler is
// published, so that l is never neither current nor listed; prune keeps it while it is
// still current.
func (r *retiring) add(l *schedLife) {
	r.mu.Lock()
	r.lives = append(r.lives, l)
	r.mu.Unlock()
}

// pruneRetired drops the retired Schedulers that are no longer busy and returns the
// others (a Scheduler still current is kept, and returned too: callers skip it). Cost:
// O(retired x backends) Load calls, 0 allocs when none is retired.
func (g *Gateway) pruneRetired() []*affinity.Scheduler {
	r := &g.retired
	r.mu.Lock()
	defer r.mu.Unlock()
	keep := r.lives[:0]
	for _, l := range r.lives {
		// Current first: once it is not, no request can pin it any more (pin).
		if l == g.rt.Load().life || l.busy() {
			keep = append(keep, l)
		}
	}
	clear(r.lives[len(keep):])
	r.lives = keep
	if len(keep) == 0 {
		return nil
	}
	out := make([]*affinity.Scheduler, len(keep))
	for i, l := range keep {
		out[i] = l.sched
	}
	return out
}

// pin returns the current routing snapshot with its Scheduler pinned (schedLife.users);
// the caller unpins it (rt.life.users.Add(-1)) once it can take no new lease. The pin
// is checked against the current snapshot after it is taken, so a Scheduler retired
// by a concurrent reload is never pinned after retiring.prune found it idle. Cost: two
// atomic loads and one atomic add (a second one when a reload intervenes), 0 allocs.
func (g *Gateway) pin() *routing {
	for {
		rt := g.rt.Load()
		rt.life.users.Add(1)
		if g.rt.Load().life == rt.life {
			return rt
		}
		rt.life.users.Add(-1)
	}
}

// registerLoadMetrics exports each configured backend's outstanding load, read at scrape
// time from the current Scheduler plus the retired ones still busy (after a reload, for
// the new configuration's backends).
func (g *Gateway) registerLoadMetrics() error {
	reqs := prometheus.NewDesc(MetricOutstandingRequests,
		"Requests leased to the backend and not yet finished (affinity.Scheduler.Load; after a reload that replaced the Scheduler, the old one's unfinished requests too).", []string{"backend"}, nil)
	cost := prometheus.NewDesc(MetricOutstandingCost,
		"Estimated prompt tokens of the backend's unfinished requests (body bytes / 4; a warm hit counts only the part beyond its cached prefix).", []string{"backend"}, nil)
	return g.reg.Register(loadCollector{g: g, reqs: reqs, cost: cost})
}

type loadCollector struct {
	g          *Gateway
	reqs, cost *prometheus.Desc
}

func (c loadCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.reqs; ch <- c.cost }

func (c loadCollector) Collect(ch chan<- prometheus.Metric) {
	bs, loads := c.g.outstanding()
	for i, b := range bs {
		ch <- prometheus.MustNewConstMetric(c.reqs, prometheus.GaugeValue, float64(loads[i].Requests), b.id)
		ch <- prometheus.MustNewConstMetric(c.cost, prometheus.GaugeValue, float64(loads[i].Cost), b.id)
	}
}

// outstanding returns the backends of the current configuration and the outstanding load
// of each (Requests and Cost): the current Scheduler's plus the retired ones' still busy.
// Cost: O(backends x busy Schedulers) Load calls, one allocation.
func (g *Gateway) outstanding() ([]*backend, []affinity.LoadSnapshot) {
	rt := g.state()
	old := g.pruneRetired() // after state(): a Scheduler retired in between is rt.sched, skipped
	loads := make([]affinity.LoadSnapshot, len(rt.backends))
	for i, b := range rt.backends {
		l := rt.sched.Load(b.id)
		for _, s := range old {
			if s != rt.sched {
				o := s.Load(b.id)
				l.Requests += o.Requests
				l.Cost += o.Cost
			}
		}
		loads[i] = affinity.LoadSnapshot{Requests: l.Requests, Cost: l.Cost}
	}
	return rt.backends, loads
}
