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
// in flight, no leak). A backend a reload removed is exported, from the IDs each
// Scheduler's snapshots configured (schedLife.ids), while it has outstanding load on the
// current or a retired Scheduler, and not after. Pins are read before the load, in that order. A reload lists the
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
	// be on (a reload that keeps the Scheduler but removes a backend leaves its requests
	// in flight leased on it). Replaced, never modified, by New and Reload (under
	// reloadMu); read by scrapes at any time.
	ids atomic.Pointer[[]string]
}

// addIDs adds the backend IDs of rt to l.ids (those it lacks). Callers serialize
// (reloadMu).
func (l *schedLife) addIDs(rt *routing) {
	var ids []string
	if p := l.ids.Load(); p != nil {
		ids = *p
	}
	n := len(ids)
	for _, b := range rt.backends {
		if !slices.Contains(ids, b.id) {
			ids = append(ids[:len(ids):len(ids)], b.id) // copy on write: readers keep theirs
		}
	}
	if len(ids) != n || l.ids.Load() == nil {
		l.ids.Store(&ids)
	}
}

// backendIDs returns l.ids (not to be modified).
func (l *schedLife) backendIDs() []string {
	if p := l.ids.Load(); p != nil {
		return *p
	}
	return nil
}

// busy reports whether l's Scheduler may still lease or hold a lease: a pinned request,
// else outstanding load on one of its backends. Pins first: a request pins before it
// leases, and a retired Scheduler gets no new pin.
func (l *schedLife) busy() bool {
	if l.users.Load() > 0 {
		return true
	}
	for _, id := range l.backendIDs() {
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
	keep := g.pruneRetiredLives()
	if len(keep) == 0 {
		return nil
	}
	out := make([]*affinity.Scheduler, len(keep))
	for i, l := range keep {
		out[i] = l.sched
	}
	return out
}

// pruneRetiredLives is pruneRetired returning the lives kept (a copy).
func (g *Gateway) pruneRetiredLives() []*schedLife {
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
	return slices.Clone(keep)
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

// registerLoadMetrics exports each backend's outstanding load, read at scrape time from
// the current Scheduler plus the retired ones still busy: every backend of the current
// configuration, and a backend a reload removed for as long as requests leased on it
// before the reload are in flight (its series go once they have ended). Label
// cardinality stays bounded by the backends configured now or still draining.
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
	ids, loads := c.g.outstanding()
	for i, id := range ids {
		ch <- prometheus.MustNewConstMetric(c.reqs, prometheus.GaugeValue, float64(loads[i].Requests), id)
		ch <- prometheus.MustNewConstMetric(c.cost, prometheus.GaugeValue, float64(loads[i].Cost), id)
	}
}

// outstanding returns backend IDs and the outstanding load of each (Requests and Cost):
// the current Scheduler's plus the retired ones' still busy. The IDs are those of the
// current configuration, in its order, then those of removed backends (known to the
// current Scheduler or a retired one: schedLife.ids) that still have load. Cost:
// O(known backends x busy Schedulers) Load calls, a few allocations.
func (g *Gateway) outstanding() ([]string, []affinity.LoadSnapshot) {
	rt := g.state()
	old := g.pruneRetiredLives() // after state(): a Scheduler retired in between is rt.sched, skipped
	load := func(id string) affinity.LoadSnapshot {
		l := rt.sched.Load(id)
		for _, o := range old {
			if o.sched != rt.sched {
				ol := o.sched.Load(id)
				l.Requests += ol.Requests
				l.Cost += ol.Cost
			}
		}
		return affinity.LoadSnapshot{Requests: l.Requests, Cost: l.Cost}
	}
	ids := make([]string, 0, len(rt.backends))
	loads := make([]affinity.LoadSnapshot, 0, len(rt.backends))
	for _, b := range rt.backends {
		ids = append(ids, b.id)
		loads = append(loads, load(b.id))
	}
	n := len(ids)
	removed := func(known []string) {
		for _, id := range known {
			if _, ok := rt.byID[id]; ok || slices.Contains(ids[n:], id) {
				continue
			}
			if l := load(id); l.Requests > 0 || l.Cost > 0 {
				ids = append(ids, id)
				loads = append(loads, l)
			}
		}
	}
	removed(rt.life.backendIDs())
	for _, o := range old {
		removed(o.backendIDs())
	}
	return ids, loads
}
