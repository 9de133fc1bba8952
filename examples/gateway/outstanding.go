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
// When a retired Scheduler may be dropped: a request pins the snapshot it uses (and so
// its Scheduler) for as long as it can lease on it (ServeHTTP from its start to its end,
// Decide until its lease is taken: pin), and a lease, once taken, shows in the
// Scheduler's load. A retired Scheduler with no pinned snapshot can take no new lease
// (every new request pins the current snapshot), so once it also has no outstanding
// load it never will: it is dropped then (checked at every scrape and every reload;
// bounded by the requests in flight, no leak). A backend a reload removed is exported,
// from the IDs each Scheduler's life tracks (schedLife.ids: those of its snapshots still
// pinned and those with load when a reload last looked), while it has outstanding load
// on the current or a retired Scheduler, and not after. Pins are read before the load,
// in that order. A reload lists the Scheduler it replaces before it publishes the new
// snapshot, so a scrape never misses it in between.
//
// Decision: the current Scheduler's load-aware placement (affinity.load) does not see
// the requests started before the reload; it starts from its own leases (and the next
// load report). Seeding it would mean leasing every in-flight request a second time on
// the new Scheduler and ending that lease with the old one, for a few seconds of
// overlap in a rare event.

// schedLife is one Scheduler's use by the routing snapshots built on it (a reload that
// keeps the Scheduler shares it with the new snapshot).
//
// What it tracks is bounded by what is configured or in flight, not by the backends ever
// configured (tester37: the list of every ID ever seen, scanned once per configured
// backend at each reload, took reloads from 0.05 s to 27.7 s over ~72k IDs of churn).
// Each reload on the Scheduler ([schedLife.prune], after it publishes the new snapshot)
// keeps the snapshots still pinned and the IDs of those snapshots plus the IDs that still
// have outstanding load, and drops the rest: O(tracked IDs + configured) time, one map.
// Decision: an ID whose last lease ends between two reloads stays tracked (its gauges
// read 0 and are not exported) until the next reload looks; nothing on the lease path
// does any bookkeeping for it.
type schedLife struct {
	sched *affinity.Scheduler
	// snaps are the routing snapshots built on sched that a request may still have
	// pinned: the newest one, and older ones that had a pin when a reload last looked
	// (one left out is not current and had no pin, so it never gets one: pin).
	// Replaced, never modified, under reloadMu (New, Reload); read by scrapes at any time.
	snaps atomic.Pointer[[]*routing]
	// ids are the backend IDs its leases may be on: those of snaps (a request on an
	// older snapshot may still lease on a backend a reload that kept the Scheduler
	// removed), and the others that had outstanding load when a reload last looked.
	// Each once. Replaced, never modified, under reloadMu; read by scrapes at any time.
	ids atomic.Pointer[[]string]
	// next is the life of the Scheduler a reload's affinity change put in this one's place
	// (nil while this one is current): a binding a request pinned on an older snapshot
	// makes here after the reload copied the table is forwarded to it (forward).
	next atomic.Pointer[schedLife]
}

// forward stores the binding of session (a binding key: scoped by tenant when tenants
// are) in tier to backendID, just made on l's Scheduler, in every Scheduler that
// replaced l's. A new binding (moved false: a miss) is stored where the key has none, as
// copyLateBindings does; a moved one (a rebind or spill, which replaced the key's
// binding) replaces what the newer table holds, which is the binding it replaced, copied
// by the reload (tester48: kept, it sent the next turn back to the backend the request
// had left, or rebound it again). A request that made the binding on l's Scheduler
// after a reload's copyLateBindings read it would lose it otherwise (tester46: a first
// turn during a reload, its second turn a miss, and a move when weights changed too):
// the request stores it, then loads next; the reload stores next, then reads the table;
// each side locks the table, so one of them sees the other. Decision: a concurrent
// turn of the same session placed on the newer Scheduler meanwhile may be overwritten by
// a moved binding (agent sessions send one turn at a time). Cost: one atomic load when
// l is current; a table Get or Bind per newer Scheduler otherwise. Safe for concurrent
// use.
func (l *schedLife) forward(session, tier, backendID string, moved bool) {
	for n := l.next.Load(); n != nil; n = n.next.Load() {
		tt := n.sched.Table()
		if moved {
			_ = tt.Bind(session, tier, backendID) // a tier whose TTL is now 0 stores nothing
		} else if _, ok := tt.Get(session, tier); !ok {
			_ = tt.Bind(session, tier, backendID)
		}
	}
}

// newLife returns the use of sched by its first snapshot rt (not yet published).
func newLife(sched *affinity.Scheduler, rt *routing) *schedLife {
	l := &schedLife{sched: sched}
	snaps := []*routing{rt}
	l.snaps.Store(&snaps)
	ids := make([]string, len(rt.backends))
	for i, b := range rt.backends {
		ids[i] = b.id
	}
	l.ids.Store(&ids)
	return l
}

// prune makes rt (just published, built on l.sched) one of l's snapshots and drops the
// snapshots no request pins any more and the IDs no kept snapshot configures and no
// lease holds. Pins are read before the load, as in busy: a request on a dropped
// snapshot has unpinned, so its leases show in the load read after. Callers serialize
// (reloadMu). Cost: O(IDs tracked + backends of the kept snapshots) map operations and
// Load calls, one map and two slices.
func (l *schedLife) prune(rt *routing) {
	snaps := []*routing{rt}
	for _, s := range l.snapshots() {
		if s != rt && s.pins.Load() > 0 {
			snaps = append(snaps, s)
		}
	}
	seen := make(map[string]struct{}, len(rt.backends))
	var ids []string
	for _, s := range snaps {
		for _, b := range s.backends {
			if _, ok := seen[b.id]; !ok {
				seen[b.id] = struct{}{}
				ids = append(ids, b.id)
			}
		}
	}
	for _, id := range l.backendIDs() {
		if _, ok := seen[id]; ok {
			continue
		}
		if ld := l.sched.Load(id); ld.Requests > 0 || ld.Cost > 0 {
			seen[id] = struct{}{}
			ids = append(ids, id)
		}
	}
	l.ids.Store(&ids)
	l.snaps.Store(&snaps)
}

// snapshots returns l.snaps (not to be modified).
func (l *schedLife) snapshots() []*routing {
	if p := l.snaps.Load(); p != nil {
		return *p
	}
	return nil
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
	for _, s := range l.snapshots() {
		if s.pins.Load() > 0 {
			return true
		}
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

// pin returns the current routing snapshot pinned (routing.pins), and with it its
// Scheduler; the caller unpins it (rt.unpin) once it can take no new lease. The pin is
// checked against the current snapshot after it is taken, so a snapshot replaced by a
// concurrent reload is never pinned after the reload found it unpinned (schedLife.prune,
// and retiring.prune for a retired Scheduler). Cost: two atomic loads and one atomic add
// (a second one when a reload intervenes), 0 allocs.
func (g *Gateway) pin() *routing {
	for {
		rt := g.rt.Load()
		rt.pins.Add(1)
		if g.rt.Load() == rt {
			return rt
		}
		rt.pins.Add(-1)
	}
}

// unpin ends a pin taken by [Gateway.pin].
func (rt *routing) unpin() { rt.pins.Add(-1) }

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
// current configuration, in its order, then those of removed backends (tracked by the
// current Scheduler's life or a retired one's: schedLife.ids) that still have load. Cost:
// O(tracked IDs x busy Schedulers) Load calls, a few allocations.
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
	var listed map[string]struct{} // removed backends listed (nil until the first)
	removed := func(known []string) {
		for _, id := range known {
			if _, ok := rt.byID[id]; ok {
				continue
			}
			if _, ok := listed[id]; ok {
				continue
			}
			if l := load(id); l.Requests > 0 || l.Cost > 0 {
				if listed == nil {
					listed = make(map[string]struct{})
				}
				listed[id] = struct{}{}
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
