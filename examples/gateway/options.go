package gateway

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentserve/sessionaffinity/affinity"
)

// Option customises [New]; options are code seams (tests, embedding), not configuration.
type Option interface{ apply(*options) }

type options struct {
	logger       *slog.Logger
	transport    http.RoundTripper
	registry     *prometheus.Registry
	schedOpts    []affinity.Option
	probeTicks   <-chan time.Time
	recheckTicks <-chan time.Time
	sweepTicks   <-chan time.Time
	loadTicks    <-chan time.Time
	now          func() time.Time
	firstScrape  time.Duration // the load scrape's first-scrape timeout (0: firstScrapeTimeout); tests
	snapLockWait time.Duration // the longest wait for binding_snapshot's lock (0: drain_seconds + 10 s); tests
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithLogger sets the logger (nil or omitted: discard). The gateway also passes it to the
// Scheduler (affinity.WithLogger) and the proxy's ErrorLog.
func WithLogger(l *slog.Logger) Option { return optionFunc(func(o *options) { o.logger = l }) }

// WithTransport sets the RoundTripper used to reach backends, for proxied requests and
// for the active and passive health checks (nil or omitted: the transport the gateway
// owns, chosen by backend_client, which [Gateway.Close] closes).
func WithTransport(rt http.RoundTripper) Option {
	return optionFunc(func(o *options) { o.transport = rt })
}

// WithRegistry makes /metrics serve reg and registers the affinity series on it (nil or
// omitted: a fresh prometheus.NewRegistry with the Go and process collectors). New fails
// if reg already holds the agentserve_affinity_* series.
func WithRegistry(reg *prometheus.Registry) Option {
	return optionFunc(func(o *options) { o.registry = reg })
}

// WithSchedulerOptions passes options (clock, logger, health set) to affinity.New. The
// gateway passes its own WithRecorder (the Prometheus adapter) and WithLogger first, so
// these override them: a WithRecorder here leaves the gateway's /metrics counters at 0.
func WithSchedulerOptions(opts ...affinity.Option) Option {
	return optionFunc(func(o *options) { o.schedOpts = append(o.schedOpts, opts...) })
}

// WithProbeTicks drives the active prober from ticks instead of its interval (tests).
func WithProbeTicks(c <-chan time.Time) Option {
	return optionFunc(func(o *options) { o.probeTicks = c })
}

// WithRecheckTicks drives the passive re-check from ticks instead of its interval (tests).
func WithRecheckTicks(c <-chan time.Time) Option {
	return optionFunc(func(o *options) { o.recheckTicks = c })
}

// WithSweepTicks drives the periodic Scheduler.Sweep from ticks instead of its
// interval (tests).
func WithSweepTicks(c <-chan time.Time) Option {
	return optionFunc(func(o *options) { o.sweepTicks = c })
}

// WithLoadReportTicks drives the load scrape's passes (load_report_seconds) from ticks
// instead of its own ticker (tests): on each tick, the backends whose report is due by
// the gateway's clock (WithClock) are scraped. [Gateway.Run] also makes a pass at
// its start and after each reload, ticks or not.
func WithLoadReportTicks(c <-chan time.Time) Option {
	return optionFunc(func(o *options) { o.loadTicks = c })
}

// WithClock sets the clock of outlier detection (ejection times, failure windows), of the
// load scrape's schedule and report ages, and,
// unless WithSchedulerOptions sets another, of the Scheduler (nil or omitted: the system
// clock). Tests pass an affinitytest.Clock.
func WithClock(c affinity.Clock) Option {
	return optionFunc(func(o *options) {
		if c != nil {
			o.now = c.Now
			o.schedOpts = append([]affinity.Option{affinity.WithClock(c)}, o.schedOpts...)
		}
	})
}

// withFirstScrapeTimeout sets the timeout of a backend's first load scrape (0: 1 s),
// still capped by the health timeout (tests, export_test.go).
func withFirstScrapeTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) { o.firstScrape = d })
}

// withSnapshotLockWait sets the longest wait of Serve for binding_snapshot's lock (0:
// drain_seconds + 10 s; tests, export_test.go).
func withSnapshotLockWait(d time.Duration) Option {
	return optionFunc(func(o *options) { o.snapLockWait = d })
}
