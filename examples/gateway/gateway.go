package gateway

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/health"
	"github.com/agentserve/sessionaffinity/hrw"
	promaffinity "github.com/agentserve/sessionaffinity/metrics/prometheus"
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
// /metrics (Prometheus) and /healthz. Create with [New]; run the health loops with
// [Gateway.Run] (or serve with [Gateway.Serve] / [Gateway.ListenAndServe]); release
// idle connections with [Gateway.Close]. Safe for concurrent use.
type Gateway struct {
	cfg        Config
	log        *slog.Logger
	sched      *affinity.Scheduler
	reg        *prometheus.Registry
	metrics    http.Handler
	proxy      *httputil.ReverseProxy
	base       http.RoundTripper
	ownedBase  *http.Transport
	prober     *health.Prober
	checker    *http.Client
	retry      bool
	recheck    <-chan time.Time
	sweep      <-chan time.Time // nil: a ticker every cfg.SweepSeconds
	backends   []*backend
	byID       map[string]*backend
	byTier     map[string][]affinity.Backend
	tierNodes  map[string][]*backend
	knownTiers map[string]bool

	mu      sync.Mutex
	passive map[string]bool // backends downed by a connection error, awaiting re-check

	closeOnce sync.Once
}

type backend struct {
	id   string
	url  *url.URL
	ab   affinity.Backend
	node hrw.Node
	tier string
}

// New builds a gateway from cfg (defaults are applied and the result validated).
// It starts no goroutine; see [Gateway.Run]. Configuration errors wrap
// [ErrInvalidConfig] (see the sentinels); a failure to register the metrics on the
// registry is returned wrapped. Options must not be nil.
func New(cfg Config, opts ...Option) (*Gateway, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt.apply(&o)
	}
	g := &Gateway{
		cfg:        cfg,
		log:        o.logger,
		retry:      cfg.retryOnConnectError(),
		recheck:    o.recheckTicks,
		sweep:      o.sweepTicks,
		byID:       make(map[string]*backend, len(cfg.Backends)),
		byTier:     make(map[string][]affinity.Backend),
		tierNodes:  make(map[string][]*backend),
		knownTiers: map[string]bool{"": true},
		passive:    make(map[string]bool),
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	for _, bc := range cfg.Backends {
		u, _ := url.Parse(bc.URL) // validated
		ab, err := affinity.NewBackend(bc.ID, bc.URL, bc.Weight)
		if err != nil {
			return nil, invalidFrom(ErrBackendWeight, fmt.Sprintf("backends: %q", bc.ID), err, affinity.ErrInvalidBackend)
		}
		b := &backend{id: bc.ID, url: u, ab: ab, node: ab.Node(), tier: bc.Tier}
		g.backends = append(g.backends, b)
		g.byID[b.id] = b
		g.knownTiers[bc.Tier] = true
	}
	for _, t := range cfg.ModelTiers {
		g.knownTiers[t] = true
	}
	for t := range cfg.Affinity.Tiers {
		g.knownTiers[t] = true
	}
	for t := range g.knownTiers {
		var abs []affinity.Backend
		var nodes []*backend
		for _, b := range g.backends {
			if b.tier == t {
				abs = append(abs, b.ab)
				nodes = append(nodes, b)
			}
		}
		if len(abs) == 0 { // a tier without dedicated backends uses all of them
			for _, b := range g.backends {
				abs = append(abs, b.ab)
				nodes = append(nodes, b)
			}
		}
		g.byTier[t] = abs
		g.tierNodes[t] = nodes
	}

	g.reg = o.registry
	if g.reg == nil {
		g.reg = prometheus.NewRegistry()
		g.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	rec, err := promaffinity.New(g.reg)
	if err != nil {
		return nil, fmt.Errorf("gateway: prometheus recorder: %w", err)
	}
	schedOpts := append([]affinity.Option{affinity.WithRecorder(rec), affinity.WithLogger(g.log)}, o.schedOpts...)
	g.sched, err = affinity.New(cfg.Affinity, schedOpts...)
	if err != nil {
		return nil, invalidFrom(ErrAffinityConfig, "affinity", err, affinity.ErrInvalidConfig)
	}
	rec.ObserveBindings(g.sched.Len)
	g.metrics = promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{})

	g.base = o.transport
	if g.base == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 256
		t.MaxIdleConns = 1024
		g.base, g.ownedBase = t, t
	}
	timeout := cfg.Health.TimeoutSeconds
	if timeout <= 0 {
		timeout = health.DefaultTimeoutSeconds
	}
	g.checker = &http.Client{Transport: g.base, Timeout: time.Duration(timeout * float64(time.Second))}

	if cfg.Health.Enabled {
		targets := make([]health.Target, len(g.backends))
		for i, b := range g.backends {
			targets[i] = health.Target{ID: b.id, URL: strings.TrimSuffix(b.url.String(), "/")}
		}
		popts := []health.ProberOption{
			health.WithObserver(g.sched.OnHealthChange),
			health.WithHTTPClient(&http.Client{Transport: g.base}),
		}
		if o.probeTicks != nil {
			popts = append(popts, health.WithTicks(o.probeTicks))
		}
		g.prober, err = health.NewProber(cfg.Health.ProbeConfig, targets, popts...)
		if err != nil {
			return nil, invalidFrom(ErrHealthConfig, "health", err, health.ErrInvalidProbeConfig, health.ErrInvalidTarget, health.ErrDuplicateTarget)
		}
	}

	g.proxy = &httputil.ReverseProxy{
		Rewrite:        g.rewrite,
		Transport:      &retryTransport{g: g},
		FlushInterval:  -1, // flush every write: SSE streams pass through unbuffered
		ModifyResponse: g.modifyResponse,
		ErrorHandler:   g.proxyError,
		ErrorLog:       slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
	return g, nil
}

// Config returns the effective configuration (defaults applied).
func (g *Gateway) Config() Config { return g.cfg }

// Scheduler returns the gateway's scheduler (for inspection and embedding).
func (g *Gateway) Scheduler() *affinity.Scheduler { return g.sched }

// Registry returns the Prometheus registry /metrics serves.
func (g *Gateway) Registry() *prometheus.Registry { return g.reg }
