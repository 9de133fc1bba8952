package gateway

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/health"
)

// The load scrape's bounds (load_report_seconds; decisions, documented in
// docs/load-aware.md, "Load report scrapes"):
const (
	// The scrape workers, in three classes, 20 scrapes at most at once (12 + 4 + 4):
	// scrapeWorkers scrape the backends whose last scrape succeeded;
	// scrapeFailingWorkers those whose last scrape failed (an error, a timeout, a page
	// without the gauges); scrapeNewWorkers those never scraped yet (added by a reload or
	// at start, or whose URL changed). A backend that accepts and never answers holds a
	// worker for a whole timeout, so a failing backend never takes the workers of the
	// backends that answer, and a new one at most 4 of them (scrapeBorrow), for 1 s
	// (tester38 finding 2: 50 new hung backends held all 12 for a timeout each, and the
	// others' scrapes stopped for ~7.5 s).
	scrapeWorkers        = 12
	scrapeFailingWorkers = 4
	scrapeNewWorkers     = 4
	// scrapeBorrow: besides their own, first scrapes may take up to this many of the
	// answering workers, when those have no backend that answered waiting (their queue
	// is empty): 8 first scrapes at once at most, and 8 answering workers always left to
	// the backends that answer. A large batch of new backends that answer (all of them
	// at start) is scraped 8 at a time, not 4.
	scrapeBorrow = 4
	// firstScrapeTimeout bounds a backend's first scrape (health.timeout_seconds if
	// shorter): a page answers in milliseconds, and a batch of new backends that hang
	// goes through at 4 per second at least (8 when the answering workers are idle), so a
	// new backend that answers, queued behind H hung ones, gets its first report within
	// ceil((H+1)/4) s (ceil((H+1)/8) s with idle answering workers; plus the scrapes' own
	// time, and up to a tenth of an interval for the pass): 13 s (7 s) behind 50, under
	// the 3 intervals of staleness at 5 s. A first scrape that times out counts as
	// failed: the failing workers retry it at its next interval, with the whole health
	// timeout.
	firstScrapeTimeout = time.Second
	// scrapeWakes is how many times per interval the scrape loop looks for the backends
	// due: each backend is scraped every load_report_seconds, up to a tenth later.
	scrapeWakes = 10
	// staleIntervals: a backend's report is stale once its last successful scrape (or,
	// never scraped, its addition or return from Down) is older than this many
	// load_report_seconds.
	staleIntervals = 3
	// staleLogIDs bounds the backend IDs one stale or fresh log line lists.
	staleLogIDs = 20
)

// MetricLoadReportsStale is the number of configured backends, not Down, whose load
// report is stale: the last successful scrape of their /metrics (load_report_seconds) is
// older than 3 intervals. No labels; 0 with load reports off. Exactly: a backend of the
// current config counts from the scrape pass (ten per interval) that finds its last
// successful scrape — or, never scraped, its addition, URL change or return from Down —
// older than 3 intervals, until a scrape succeeds (at once), or a pass finds it Down (held
// Down by the active check, or ejected by outlier detection, which with health checks
// off still acts on requests' connection failures) or removed. Draining backends count.
// Each end is logged at Info (loadstale.go).
const MetricLoadReportsStale = "agentserve_gateway_load_reports_stale"

// loadScraper is the state of the load scrape, kept across reloads: each backend's
// schedule and the age of its report. Backends are keyed by ID; a changed URL starts
// afresh.
type loadScraper struct {
	mu       sync.Mutex
	byID     map[string]*scrapeEntry
	sched    *affinity.Scheduler          // the Scheduler the reports went to: a new one has none
	queue    [scrapeClasses][]string      // due backends, by class (classAnswering ...)
	wake     [scrapeClasses]chan struct{} // a send per enqueue (buffered 1)
	started  bool                         // the workers run (under Run)
	borrowed int                          // answering workers on a first scrape (scrapeBorrow at most)

	newStale []string              // to log (rate-limited)
	ended    [endReasons][]string  // stale episodes ended, by why (loadstale.go), to log (rate-limited)
	warnedAt time.Time             // when the stale line was last logged
	endedAt  [endReasons]time.Time // when each ended line was last logged
	staleNow int                   // entries with stale set (the metric)
	lastErr  map[string]string
}

type scrapeEntry struct {
	url     string
	next    time.Time // due from then on
	since   time.Time // last successful report, or when first seen or back from Down
	failing bool      // the last scrape failed: the failing workers take it
	scraped bool      // scraped at least once (else the new workers take it)
	busy    bool      // queued or being scraped
	down    bool      // Down at the last pass: not scraped, report cleared
	stale   bool      // reported stale (Warn) and not fresh since
}

func (s *loadScraper) init() {
	if s.byID == nil {
		s.byID = make(map[string]*scrapeEntry)
		s.lastErr = make(map[string]string)
		for c := range s.wake {
			s.wake[c] = make(chan struct{}, 1)
		}
	}
}

// reset forgets every backend's schedule and report age (load reports turned off) and
// returns the IDs whose report was stale, sorted: their episodes end here (Run logs
// them).
func (s *loadScraper) reset() (wasStale []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, e := range s.byID {
		if e.stale {
			wasStale = append(wasStale, id)
		}
		s.drop(id, e)
	}
	s.queue = [scrapeClasses][]string{}
	s.newStale, s.ended = nil, [endReasons][]string{}
	slices.Sort(wasStale)
	return wasStale
}

// scrapeLoop runs the load scrape of one Run generation: a pass at once (a reload
// does not delay the backends that are due, and new backends are scraped at once),
// then one every load_report_seconds / scrapeWakes (or on each test tick).
func (g *Gateway) scrapeLoop(ctx context.Context, rt *routing) {
	g.scrapePass(rt)
	every(ctx, g.opts.loadTicks, max(rt.cfg.LoadReportSeconds/scrapeWakes, 0.001), func() { g.scrapePass(rt) })
}

// startScrapeWorkers starts the workers once per Run (they outlive its reloads, so a
// reload neither cancels a scrape in flight nor clears the reports still to come).
func (g *Gateway) startScrapeWorkers(ctx context.Context, wg *sync.WaitGroup) {
	s := &g.scrape
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return
	}
	s.init()
	s.started, s.borrowed = true, 0
	for class, n := range classWorkers {
		for range n {
			wg.Go(func() { g.scrapeWorker(ctx, class) })
		}
	}
	wg.Go(func() {
		<-ctx.Done()
		s.mu.Lock()
		s.started = false
		s.queue = [scrapeClasses][]string{}
		for _, e := range s.byID {
			e.busy = false
		}
		s.mu.Unlock()
	})
}

// scrapePass drops the backends rt no longer has, and queues each backend that is due
// and not Down; it marks stale reports and logs them (rate-limited). O(backends).
func (g *Gateway) scrapePass(rt *routing) {
	s := &g.scrape
	now := g.now()
	every := duration(rt.cfg.LoadReportSeconds)
	var clear []string
	s.mu.Lock()
	s.init()
	if s.sched != rt.sched { // a new Scheduler holds no reports: scrape everything now
		s.sched = rt.sched
		for _, e := range s.byID {
			e.next = time.Time{}
		}
	}
	for id, e := range s.byID {
		if rt.byID[id] == nil {
			s.drop(id, e)
		}
	}
	queued := [scrapeClasses]bool{}
	for _, b := range rt.backends {
		url := b.url.String()
		e := s.byID[b.id]
		if e == nil || e.url != url {
			if e != nil {
				s.drop(b.id, e)
			}
			e = &scrapeEntry{url: url, since: now}
			s.byID[b.id] = e
		}
		if rt.sched.Health().State(b.id) == health.Down { // active check or ejection
			if !e.down {
				e.down = true
				s.endStale(b.id, e, endDown) // not expected to report while Down
				clear = append(clear, b.id)
			}
			continue
		}
		if e.down { // back: scrape at once, its age counts from now
			e.down, e.since, e.next = false, now, time.Time{}
		}
		if !e.stale && now.Sub(e.since) > staleIntervals*every {
			s.setStale(e, true)
			s.newStale = append(s.newStale, b.id)
		}
		if !e.busy && !now.Before(e.next) && s.started {
			e.busy, e.next = true, now.Add(every)
			c := e.class()
			s.queue[c] = append(s.queue[c], b.id)
			queued[c] = true
		}
	}
	stale, ended := s.takeLogs(now, every)
	s.mu.Unlock()
	if queued[classNew] { // idle answering workers may take them too
		queued[classAnswering] = true
	}
	for c, q := range queued {
		if q {
			s.signal(c)
		}
	}
	for _, id := range clear {
		_ = rt.sched.ReportLoad(id, affinity.BackendLoad{}) // Down: its old queue is no guide on its return
	}
	if len(stale) > 0 {
		g.log.Warn("backend load reports stale: placement reads their last report, or none",
			"backends", stale[:min(len(stale), staleLogIDs)], "count", len(stale), "older_than", staleIntervals*every, "last_error", s.errorsOf(stale))
	}
	g.logStaleEnded(ended)
}

// drop forgets a backend removed (or whose URL changed); a scrape in flight for it
// finds no entry and is not reported. Under s.mu.
func (s *loadScraper) drop(id string, e *scrapeEntry) {
	s.endStale(id, e, endRemoved)
	delete(s.byID, id)
	delete(s.lastErr, id)
}

// recordScrape reports a scrape of b to the current Scheduler (a failed one clears the
// report, as before) and updates b's schedule entry, unless b was removed or its URL
// changed meanwhile (the result is dropped). worker: the scrape was the entry's own
// (queued by a pass), not one of ReportLoads.
func (g *Gateway) recordScrape(b *backend, l affinity.BackendLoad, err error, worker bool) {
	s := &g.scrape
	now := g.now()
	url := b.url.String()
	s.mu.Lock()
	s.init()
	e := s.byID[b.id]
	if e != nil && e.url != url {
		s.mu.Unlock()
		return
	}
	if e != nil {
		if worker {
			e.busy = false
		}
		e.failing, e.scraped = err != nil, true
		if err == nil {
			e.since = now
			delete(s.lastErr, b.id)
			s.endStale(b.id, e, endFresh)
		} else {
			s.lastErr[b.id] = err.Error()
		}
	}
	s.mu.Unlock()
	if err != nil {
		g.log.Debug("backend load report failed", "backend", b.id, "err", err)
	}
	if err := g.state().sched.ReportLoad(b.id, l); err != nil {
		g.log.Warn("backend load report rejected", "backend", b.id, "err", err)
	}
}

// registerScrapeMetrics registers [MetricLoadReportsStale].
func (g *Gateway) registerScrapeMetrics() error {
	return g.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: MetricLoadReportsStale,
		Help: "Configured backends, not Down, whose last successful load report scrape (load_report_seconds) is older than 3 intervals.",
	}, func() float64 {
		g.scrape.mu.Lock()
		defer g.scrape.mu.Unlock()
		if g.state().cfg.LoadReportSeconds <= 0 {
			return 0
		}
		return float64(g.scrape.staleNow)
	}))
}
