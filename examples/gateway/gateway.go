package gateway

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/redisstore"
	"github.com/agentserve/sessionaffinity/health"
	"github.com/agentserve/sessionaffinity/hrw"
	"github.com/agentserve/sessionaffinity/metrics"
)

// Response headers set on every proxied response (and on gateway errors once a
// backend was chosen).
const (
	// HeaderBackend carries the ID of the backend that served the request.
	HeaderBackend = "X-Agent-Serve-Backend"
	// HeaderAffinityHit is "true" when the request reused the session's binding.
	HeaderAffinityHit = "X-Agent-Serve-Affinity-Hit"
	// HeaderRequestID, when present on a request without a session ID, is the key the
	// request is hashed by (otherwise a random key is used).
	HeaderRequestID = "X-Request-Id"
	// MetadataKey is the top-level key inserted into non-streaming JSON responses.
	MetadataKey = "x_agent_serve"
)

// maxInjectBytes bounds the JSON response bodies the gateway rewrites; larger bodies
// pass through without the x_agent_serve object (the headers are still set).
const maxInjectBytes = 16 << 20

// Metadata is the object inserted under "x_agent_serve" in non-streaming JSON responses.
type Metadata struct {
	Backend     string `json:"backend"`      // ID of the backend that served the request
	AffinityHit bool   `json:"affinity_hit"` // true when the session's binding was reused
	Tier        string `json:"tier"`         // the request's tier; "" is the default tier
}

// Gateway is an http.Handler that routes each request to a backend chosen by an
// affinity.Scheduler and proxies it with httputil.ReverseProxy. It serves its own
// /metrics (Prometheus), /healthz (liveness) and /readyz (503 when no backend can take
// requests). Create with [New]; run the health loops with
// [Gateway.Run] (or serve with [Gateway.Serve] / [Gateway.ListenAndServe]); release
// idle connections with [Gateway.Close]. Safe for concurrent use.
type Gateway struct {
	rt        atomic.Pointer[routing] // config, backends, tiers, Scheduler, prober: see reload.go
	opts      options
	log       *slog.Logger
	rec       metrics.Recorder // the metrics.exporter adapter (Prometheus or OTel)
	reg       *prometheus.Registry
	metrics   http.Handler
	proxy     *httputil.ReverseProxy
	base      http.RoundTripper
	ownedBase idleTransport // the transport New made (nil with WithTransport)
	checker   *http.Client
	recheck   <-chan time.Time
	sweep     <-chan time.Time // nil: a ticker every cfg.SweepSeconds

	requests *prometheus.CounterVec // MetricRequests (metrics.go)
	outcomes outcomeCounters        // its children by code class and source (metrics.go)
	outliers *outliers              // passive outlier detection (outlier.go)
	limits   limiter                // requests and bytes in flight (limits.go)
	now      func() time.Time

	store     *redisstore.Store // nil: no store: block (store.go)
	storeOpts []affinity.Option // the store's Scheduler options, given to every Scheduler

	bufs bufferPool // response bodies being rewritten, ReverseProxy copy buffers

	reloadMu sync.Mutex    // serializes Reload
	retired  retiring      // Schedulers replaced by a reload that may still hold leases (outstanding.go)
	reloaded chan struct{} // Reload -> Run: restart the loops with the new state
}

type backend struct {
	id   string
	url  *url.URL
	ab   affinity.Backend
	node hrw.Node
	tier string
	prog *progress // last progress on any request (progress.go); kept across reloads
}

// New builds a gateway from cfg (defaults are applied and the result validated, and
// binding_snapshot's directory is checked: see [Config.BindingSnapshot]).
// It starts no goroutine; see [Gateway.Run]. Configuration errors wrap
// [ErrInvalidConfig] (see the sentinels); a failure to register the metrics on the
// registry is returned wrapped. Options must not be nil.
func New(cfg Config, opts ...Option) (*Gateway, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkBindingSnapshot(cfg.BindingSnapshot); err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt.apply(&o)
	}
	g := &Gateway{
		opts:     o,
		log:      o.logger,
		recheck:  o.recheckTicks,
		sweep:    o.sweepTicks,
		reloaded: make(chan struct{}, 1),
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	rt, err := newRouting(cfg)
	if err != nil {
		return nil, err
	}

	g.reg = o.registry
	if g.reg == nil {
		g.reg = prometheus.NewRegistry()
		g.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	var observeBindings func(func() int)
	if g.rec, observeBindings, err = newRecorder(cfg.Metrics.Exporter, g.reg); err != nil {
		return nil, err
	}
	if g.storeOpts, err = g.openStore(cfg.Store); err != nil {
		return nil, err
	}
	if rt.sched, err = g.newScheduler(schedulerConfig(cfg)); err != nil {
		g.closeStore()
		return nil, err
	}
	rt.life = &schedLife{sched: rt.sched}
	rt.life.addIDs(rt)
	observeBindings(func() int { return g.state().sched.Len() })
	if rt.tenants != nil && rt.tenants.secret == nil {
		g.log.Warn("tenant scoping without a secret: tenant hashes are unkeyed SHA-256; set the variable to a random per-deployment value",
			"secret_env", cfg.Tenant.SecretEnv)
	}
	g.now = o.now
	if g.now == nil {
		g.now = time.Now
	}
	g.outliers = newOutliers(g, g.now)
	if err := g.registerGatewayMetrics(); err != nil {
		return nil, fmt.Errorf("gateway: prometheus gateway metrics: %w", err)
	}
	if err := g.registerLoadMetrics(); err != nil {
		return nil, fmt.Errorf("gateway: load metrics: %w", err)
	}
	g.metrics = promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{})

	g.base = o.transport
	if g.base == nil {
		var t idleTransport = newTransport(cfg.Timeouts)
		if isDirect(cfg.BackendClient) {
			t = newDirectTransport(cfg.Timeouts)
		}
		g.base, g.ownedBase = t, t
	}
	timeout := cfg.Health.TimeoutSeconds
	if timeout <= 0 {
		timeout = health.DefaultTimeoutSeconds
	}
	g.checker = &http.Client{Transport: g.base, Timeout: time.Duration(timeout * float64(time.Second))}

	if rt.prober, err = g.newProber(rt); err != nil {
		return nil, err
	}
	g.rt.Store(rt)

	g.proxy = &httputil.ReverseProxy{
		Rewrite:   g.rewrite,
		Transport: &retryTransport{g: g},
		// 0: no periodic flush. ReverseProxy still flushes every write of a streaming
		// response (text/event-stream, or no Content-Length), so SSE passes through
		// unbuffered, while a plain JSON response goes out in one write.
		FlushInterval:  0,
		BufferPool:     &g.bufs,
		ModifyResponse: g.modifyResponse,
		ErrorHandler:   g.proxyError,
		// Its only line in use names no backend ("read error during body copy"): Debug.
		// The gateway logs a backend's read error itself at Warn, with the backend
		// (idleBody), and a client that goes away is no error (a read that fails for it
		// returns context.Canceled, which the ReverseProxy does not log).
		ErrorLog: slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
	return g, nil
}

// Config returns the effective configuration (defaults applied).
func (g *Gateway) Config() Config { return g.state().cfg }

// Scheduler returns the gateway's current scheduler (for inspection and embedding). A
// [Gateway.Reload] that changes the affinity section replaces it.
func (g *Gateway) Scheduler() *affinity.Scheduler { return g.state().sched }

// Registry returns the Prometheus registry /metrics serves.
func (g *Gateway) Registry() *prometheus.Registry { return g.reg }
