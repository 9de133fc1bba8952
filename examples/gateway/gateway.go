package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
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
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithLogger sets the logger (nil or omitted: discard). The gateway also passes it to the
// Scheduler (affinity.WithLogger) and the proxy's ErrorLog.
func WithLogger(l *slog.Logger) Option { return optionFunc(func(o *options) { o.logger = l }) }

// WithTransport sets the RoundTripper used to reach backends, for proxied requests and
// for the active and passive health checks (nil or omitted: a clone of
// http.DefaultTransport that the gateway owns and [Gateway.Close] closes).
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

// Run runs the background loops until ctx is done: the active prober (when
// health.enabled), the passive re-check of backends downed by connection errors, and
// the periodic reclamation of expired bindings (Scheduler.Sweep every sweep_seconds).
// It returns nil after ctx is done and every loop has stopped. Call it once, and not
// at all when using [Gateway.Serve] or [Gateway.ListenAndServe], which call it.
func (g *Gateway) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	if g.prober != nil {
		wg.Go(func() {
			if err := g.prober.Run(ctx); err != nil && ctx.Err() == nil {
				g.log.Error("health prober stopped", "err", err)
			}
		})
	}
	wg.Go(func() { g.recheckLoop(ctx) })
	wg.Go(func() { g.sweepLoop(ctx) })
	wg.Wait()
	return nil
}

// sweepLoop reclaims expired bindings every sweep_seconds until ctx is done, so that
// the table shrinks even when traffic stops (inserts only reclaim a few at a time).
func (g *Gateway) sweepLoop(ctx context.Context) {
	every(ctx, g.sweep, g.cfg.SweepSeconds, func() {
		if n := g.sched.Sweep(); n > 0 {
			g.log.Debug("reclaimed expired bindings", "count", n)
		}
	})
}

// every calls fn on each tick until ctx is done. ticks drives it in tests; nil means a
// ticker every seconds.
func every(ctx context.Context, ticks <-chan time.Time, seconds float64, fn func()) {
	if ticks == nil {
		t := time.NewTicker(time.Duration(seconds * float64(time.Second)))
		defer t.Stop()
		ticks = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
			fn()
		}
	}
}

// Serve serves HTTP on ln and runs [Gateway.Run] until ctx is done, then shuts the
// server down gracefully (in-flight requests get up to 10 s) and closes idle
// backend connections. It returns nil after a clean shutdown.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 30 * time.Second}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { _ = g.Run(runCtx) })
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var err error
	select {
	case err = <-errc: // listener failed
	case <-ctx.Done():
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if serr := srv.Shutdown(sctx); serr != nil {
			_ = srv.Close()
		}
		scancel()
		if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
			err = serr
		}
	}
	cancel()
	wg.Wait()
	g.Close()
	return err
}

// ListenAndServe listens on the configured address and calls [Gateway.Serve].
func (g *Gateway) ListenAndServe(ctx context.Context) error {
	ln, err := net.Listen("tcp", g.cfg.Listen)
	if err != nil {
		return fmt.Errorf("gateway: listen %s: %w", g.cfg.Listen, err)
	}
	return g.Serve(ctx, ln)
}

// Close releases idle backend connections of the gateway-owned transport.
// Idempotent; it does not stop [Gateway.Run] (cancel its context for that).
func (g *Gateway) Close() {
	g.closeOnce.Do(func() {
		if g.ownedBase != nil {
			g.ownedBase.CloseIdleConnections()
		}
	})
}

// ServeHTTP serves /metrics and /healthz itself and proxies everything else.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/metrics":
		g.metrics.ServeHTTP(w, r)
		return
	case "/healthz":
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		return
	}

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "request_too_large",
				fmt.Sprintf("request body exceeds max_body_bytes (%d bytes)", g.cfg.MaxBodyBytes))
			return
		}
		writeError(w, http.StatusBadRequest, "bad_body", "reading request body: "+err.Error())
		return
	}

	model, err := parseModel(r, body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_json", err.Error())
		return
	}
	session := g.sessionID(r)
	tier, err := g.tier(r, model)
	if err != nil {
		writeError(w, http.StatusBadRequest, "unknown_tier", err.Error())
		return
	}
	st := &route{session: session, tier: tier, in: r}
	if session == "" {
		if g.cfg.RequireSession {
			writeError(w, http.StatusBadRequest, "missing_session_id",
				"missing session ID: send one of the headers "+strings.Join(g.cfg.SessionHeaders, ", "))
			return
		}
		st.key = r.Header.Get(HeaderRequestID)
		if st.key == "" {
			st.key = randomKey()
		}
	}
	b, hit, err := g.choose(st)
	if err != nil {
		status, code := classify(err)
		writeError(w, status, code, err.Error())
		return
	}
	st.backend, st.hit = b, hit

	out := r.WithContext(context.WithValue(r.Context(), routeKey{}, st))
	out.TransferEncoding = nil
	out.ContentLength = int64(len(body))
	if len(body) == 0 {
		out.Body, out.GetBody = http.NoBody, nil
	} else {
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	g.proxy.ServeHTTP(w, out)
}

// route is the per-request routing state shared by Rewrite, the retry transport,
// ModifyResponse and ErrorHandler through the request context.
type route struct {
	session string
	tier    string
	key     string // HRW key for requests without a session
	in      *http.Request

	mu      sync.Mutex
	backend *backend
	hit     bool
	retried bool
}

func (st *route) current() (*backend, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.backend, st.hit
}

type routeKey struct{}

func routeFrom(ctx context.Context) *route {
	st, _ := ctx.Value(routeKey{}).(*route)
	return st
}

// choose picks the backend: the scheduler for requests with a session, a one-off
// HRW pick over the request key (nothing stored) otherwise.
func (g *Gateway) choose(st *route) (*backend, bool, error) {
	if st.session != "" {
		ab, hit, err := g.sched.SelectBackend(st.session, st.tier, g.byTier[st.tier])
		if err != nil {
			return nil, false, err
		}
		return g.byID[ab.ID()], hit, nil
	}
	nodes := g.tierNodes[st.tier]
	hs := g.sched.Health()
	var best hrw.Best
	for _, want := range []health.State{health.Healthy, health.Draining} {
		best.Reset(hrw.KeyHash(st.key))
		for i, b := range nodes {
			if hs.State(b.id) == want {
				best.Offer(i, &b.node)
			}
		}
		if i := best.Index(); i >= 0 {
			return nodes[i], false, nil
		}
	}
	return nil, false, fmt.Errorf("%w: tier %q", affinity.ErrNoEligibleBackend, st.tier)
}

func (g *Gateway) sessionID(r *http.Request) string {
	for _, h := range g.cfg.SessionHeaders {
		if v := strings.TrimSpace(r.Header.Get(h)); v != "" {
			return v
		}
	}
	return ""
}

func (g *Gateway) tier(r *http.Request, model string) (string, error) {
	if v := r.Header.Get(g.cfg.TierHeader); v != "" {
		v = strings.TrimSpace(v)
		if !g.knownTiers[v] {
			return "", fmt.Errorf("unknown tier %q in header %s", truncate(v, 64), g.cfg.TierHeader)
		}
		return v, nil
	}
	return g.cfg.ModelTiers[model], nil
}

// parseModel extracts the "model" of a JSON request body. The body of a POST request
// must be a JSON object (an empty body is not one) when its Content-Type is JSON, or
// when its path is a JSON endpoint (isJSONEndpoint) and it is not multipart, or when its
// Content-Type is absent and it has a body; other requests are not inspected.
func parseModel(r *http.Request, body []byte) (string, error) {
	if r.Method != http.MethodPost {
		return "", nil
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		isJSON := err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
		if !isJSON && (strings.HasPrefix(mt, "multipart/") || !isJSONEndpoint(r.URL.Path)) {
			return "", nil
		}
	} else if len(body) == 0 && !isJSONEndpoint(r.URL.Path) {
		return "", nil // a bodiless POST that claims no type
	}
	if len(body) == 0 {
		return "", errors.New("malformed JSON request body: empty body")
	}
	var req struct {
		Model json.RawMessage `json:"model"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field == "" {
			return "", fmt.Errorf("malformed JSON request body: must be a JSON object, got %s", te.Value)
		}
		return "", fmt.Errorf("malformed JSON request body: %v", err)
	}
	if b := bytes.TrimLeft(body, " \t\r\n"); b[0] != '{' { // null decodes without error
		return "", errors.New("malformed JSON request body: must be a JSON object, got null")
	}
	if len(req.Model) == 0 || string(req.Model) == "null" {
		return "", nil
	}
	var model string
	if err := json.Unmarshal(req.Model, &model); err != nil {
		return "", fmt.Errorf("malformed JSON request body: \"model\" must be a string, got %s", req.Model)
	}
	return model, nil
}

// isJSONEndpoint reports whether path is one of the OpenAI-compatible POST endpoints
// whose body is JSON whatever Content-Type the client sent (curl -d sends
// application/x-www-form-urlencoded).
func isJSONEndpoint(path string) bool {
	for _, e := range [...]string{"/chat/completions", "/completions", "/embeddings", "/responses"} {
		if strings.HasSuffix(path, e) {
			return true
		}
	}
	return false
}

func (g *Gateway) rewrite(pr *httputil.ProxyRequest) {
	st := routeFrom(pr.In.Context())
	b, _ := st.current()
	pr.SetURL(b.url)
	pr.SetXForwarded()
}

func (g *Gateway) modifyResponse(resp *http.Response) error {
	st := routeFrom(resp.Request.Context())
	if st == nil {
		return nil
	}
	b, hit := st.current()
	resp.Header.Set(HeaderBackend, b.id)
	resp.Header.Set(HeaderAffinityHit, strconv.FormatBool(hit))
	if !injectable(resp) {
		return nil
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxInjectBytes+1))
	if err != nil {
		return fmt.Errorf("gateway: reading backend response: %w", err)
	}
	if len(data) > maxInjectBytes { // too large to rewrite: pass through unchanged
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(data), resp.Body), resp.Body}
		return nil
	}
	_ = resp.Body.Close()
	meta, _ := json.Marshal(Metadata{Backend: b.id, AffinityHit: hit, Tier: st.tier})
	if out, ok := InjectMetadata(data, meta); ok {
		data = out
	}
	resp.Body = io.NopCloser(bytes.NewReader(data))
	resp.ContentLength = int64(len(data))
	resp.Header.Set("Content-Length", strconv.Itoa(len(data)))
	resp.TransferEncoding = nil
	return nil
}

// injectable reports whether resp is a non-streaming, uncompressed JSON response.
func injectable(resp *http.Response) bool {
	if resp.Request != nil && resp.Request.Method == http.MethodHead {
		return false
	}
	if resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified {
		return false
	}
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && ce != "identity" {
		return false
	}
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil {
		return false
	}
	return mt == "application/json"
}

// InjectMetadata inserts `"x_agent_serve": meta` as the first member of the JSON
// object in body, keeping the rest byte for byte. It returns body unchanged and
// false when body is not a valid JSON object or already has the key at top level.
// meta must be valid JSON. Cost: O(len(body)) time; besides the result (one allocation
// of about len(body)+len(meta) bytes) it decodes the top-level object into a map to check
// the key, which allocates per top-level member. Safe for concurrent use.
func InjectMetadata(body, meta []byte) ([]byte, bool) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' || !json.Valid(body) {
		return body, false
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return body, false
	}
	if _, exists := top[MetadataKey]; exists {
		return body, false
	}
	head := len(body) - len(trimmed) + 1 // through the '{'
	out := make([]byte, 0, len(body)+len(meta)+len(MetadataKey)+4)
	out = append(out, body[:head]...)
	out = append(out, '"')
	out = append(out, MetadataKey...)
	out = append(out, '"', ':')
	out = append(out, meta...)
	if len(top) > 0 {
		out = append(out, ',')
	}
	out = append(out, body[head:]...)
	return out, true
}

func (g *Gateway) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil { // the client went away
		return
	}
	if st := routeFrom(r.Context()); st != nil {
		b, hit := st.current()
		w.Header().Set(HeaderBackend, b.id)
		w.Header().Set(HeaderAffinityHit, strconv.FormatBool(hit))
		g.log.Warn("backend request failed", "backend", b.id, "err", err)
		writeError(w, http.StatusBadGateway, "backend_unavailable", fmt.Sprintf("backend %q: %v", b.id, err))
		return
	}
	writeError(w, http.StatusBadGateway, "backend_unavailable", err.Error())
}

// classify maps a routing error to an HTTP status and an error code.
func classify(err error) (int, string) {
	switch {
	case errors.Is(err, affinity.ErrSessionIDTooLong):
		return http.StatusBadRequest, "session_id_too_long"
	case errors.Is(err, affinity.ErrEmptySessionID):
		return http.StatusBadRequest, "missing_session_id"
	case errors.Is(err, affinity.ErrTierTooLong):
		return http.StatusBadRequest, "tier_too_long"
	case errors.Is(err, affinity.ErrNoEligibleBackend), errors.Is(err, affinity.ErrNoCandidates):
		return http.StatusServiceUnavailable, "no_backend_available"
	default:
		return http.StatusInternalServerError, "routing_error"
	}
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    string `json:"code"`
}

// writeError writes an OpenAI-style JSON error: {"error":{"message","type","code"}}.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	typ := "invalid_request_error"
	if status >= 500 {
		typ = "server_error"
	}
	writeJSON(w, status, errorBody{Error: errorDetail{Message: msg, Type: typ, Code: code}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}

func randomKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// truncate shortens s to at most n bytes (plus "...") for error messages that echo
// client input.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
