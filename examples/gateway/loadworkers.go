package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/health"
)

// The load scrape's workers (loadsched.go starts them and queues the backends due): three
// classes, each with its own queue, and first scrapes that may borrow idle answering
// workers (decision, tester38 finding 2; docs/load-aware.md, "Load report scrapes").

// The scrape classes: each has its own queue and workers.
const (
	classAnswering = iota // the last scrape succeeded: scrapeWorkers
	classFailing          // the last scrape failed: scrapeFailingWorkers
	classNew              // never scraped: scrapeNewWorkers, firstScrapeTimeout
	scrapeClasses
)

// classWorkers is the number of workers of each class.
var classWorkers = [scrapeClasses]int{scrapeWorkers, scrapeFailingWorkers, scrapeNewWorkers}

// class returns the workers' class that scrapes e.
func (e *scrapeEntry) class() int {
	switch {
	case !e.scraped:
		return classNew
	case e.failing:
		return classFailing
	}
	return classAnswering
}

// signal wakes a worker of class (if none is awake to look already).
func (s *loadScraper) signal(class int) {
	select {
	case s.wake[class] <- struct{}{}:
	default:
	}
}

// ready reports whether a worker of class has a backend to take. Under s.mu.
func (s *loadScraper) ready(class int) bool {
	return len(s.queue[class]) > 0 ||
		class == classAnswering && len(s.queue[classNew]) > 0 && s.borrowed < scrapeBorrow
}

// take returns the next backend for a worker of class, and the class of its scrape: its
// own queue first, then, for an answering worker, a new backend if fewer than
// scrapeBorrow answering workers are on one ("" if none). It passes the wake-up on if
// more is ready. Under s.mu.
func (s *loadScraper) take(class int) (id string, as int) {
	switch {
	case len(s.queue[class]) > 0:
		id, as = s.queue[class][0], class
		s.queue[class] = s.queue[class][1:]
	case s.ready(class): // borrowed
		id, as = s.queue[classNew][0], classNew
		s.queue[classNew] = s.queue[classNew][1:]
		s.borrowed++
	default:
		return "", class
	}
	if s.ready(class) {
		s.signal(class)
	}
	return id, as
}

// scrapeWorker scrapes the backends of its class's queue (and, answering, some of the
// new ones: take) until ctx is done.
func (g *Gateway) scrapeWorker(ctx context.Context, class int) {
	s := &g.scrape
	for {
		s.mu.Lock()
		id, as := s.take(class)
		s.mu.Unlock()
		if id == "" {
			select {
			case <-ctx.Done():
				return
			case <-s.wake[class]:
				continue
			}
		}
		if g.scrapeOne(ctx, id, as) != nil { // Run is over
			return
		}
		if as != class {
			s.mu.Lock()
			s.borrowed = max(s.borrowed-1, 0) // 0 again at the next Run
			s.mu.Unlock()
		}
	}
}

// scrapeOne scrapes the backend id (queued for a scrape of class as) and records it;
// it returns ctx's error if Run ended meanwhile (the report is left as it was).
func (g *Gateway) scrapeOne(ctx context.Context, id string, as int) error {
	s := &g.scrape
	rt := g.state()
	b := rt.byID[id]
	// Removed, or gone Down while queued (a batch of new backends that hang goes Down
	// by the health checks while the new workers go through it): not scraped; the
	// next pass sees it Down.
	if b == nil || rt.sched.Health().State(id) == health.Down {
		s.mu.Lock()
		if e := s.byID[id]; e != nil {
			e.busy = false
		}
		s.mu.Unlock()
		return nil
	}
	l, err := g.scrapeFirst(ctx, b, as)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	g.recordScrape(b, l, err, true)
	return nil
}

// scrapeFirst scrapes b, within firstScrapeTimeout (or the health timeout if shorter)
// for the new workers' class.
func (g *Gateway) scrapeFirst(ctx context.Context, b *backend, class int) (affinity.BackendLoad, error) {
	if class != classNew {
		return g.scrapeLoad(ctx, b)
	}
	d := g.opts.firstScrape
	if d <= 0 {
		d = firstScrapeTimeout
	}
	if t := g.checker.Timeout; t > 0 && t < d {
		return g.scrapeLoad(ctx, b) // the health timeout is shorter
	}
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	l, err := g.scrapeLoad(sctx, b)
	if err != nil && ctx.Err() == nil && errors.Is(sctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("first scrape: no answer within %v", d)
	}
	return l, err
}
