package fakevllm

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Response headers set on every response, and the marker of generated text.
const (
	// HeaderSimulator names the header whose value is always "simulator": the response
	// comes from fakevllm, not vLLM.
	HeaderSimulator = "X-Fakevllm"
	// HeaderBackend names the header that carries Config.ID.
	HeaderBackend = "X-Fakevllm-Backend"
	// SimulatorMarker starts every generated completion text (the first output token).
	SimulatorMarker = "[fakevllm simulator]"
)

// Server is the simulator: an http.Handler serving the routes listed in the package
// documentation. It is safe for concurrent use, starts no goroutines of its own (all work
// runs on the caller's request goroutines) and needs no Close.
type Server struct {
	cfg     Config
	sleep   func(ctx context.Context, d time.Duration) error
	now     func() time.Time
	created int64

	cache    *prefixCache
	slots    slots
	healthy  atomic.Bool
	seq      atomic.Uint64
	registry *prometheus.Registry
	metrics  http.Handler
	mux      *http.ServeMux

	requests, completed, cancelled, rejected  atomic.Uint64
	promptTokens, queriedTokens, cachedTokens atomic.Uint64
	completionTokens                          atomic.Uint64
}

// Stats is a point-in-time snapshot of a Server's counters. Token counts follow the
// token rule of [EstimateTokens].
type Stats struct {
	Requests         uint64 // valid chat completion requests accepted (queued or run)
	Completed        uint64 // requests whose response was fully written
	Cancelled        uint64 // requests abandoned by the client (while queued or running)
	Rejected         uint64 // responses with a 4xx status, on any route (400, 404, 405, 413)
	PromptTokens     uint64 // prompt tokens of accepted requests
	QueriedTokens    uint64 // prompt tokens looked up in the prefix cache (vllm:prefix_cache_queries_total)
	CachedTokens     uint64 // of those, served from the prefix cache (vllm:prefix_cache_hits_total)
	CompletionTokens uint64 // output tokens generated
	CacheBlocks      int    // blocks resident in the prefix cache now
	EvictedBlocks    uint64 // blocks evicted from the prefix cache (LRU at capacity)
	Running          int    // requests holding one of the MaxConcurrent slots now
	Waiting          int    // requests queued for a slot now
}

// New validates cfg, applies defaults and returns a healthy Server with an empty cache.
// Errors wrap [ErrInvalidConfig]. Each Server has its own Prometheus registry (never the
// global one), so many can run in one process. nil options are ignored.
func New(cfg Config, opts ...Option) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	o := options{sleep: sleepCtx, now: time.Now}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	s := &Server{
		cfg:   cfg,
		sleep: o.sleep,
		now:   o.now,
		cache: newPrefixCache(cfg.CacheBlocks),
		slots: slots{max: cfg.MaxConcurrent},
	}
	s.created = s.now().Unix()
	s.healthy.Store(true)
	if err := s.initMetrics(); err != nil {
		return nil, err
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("/v1/chat/completions", s.handleChat)
	s.mux.HandleFunc("/v1/models", s.handleModels)
	s.mux.HandleFunc("/health", s.handleHealth)
	s.mux.HandleFunc("/metrics", s.handleMetrics)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, http.StatusNotFound, "not_found", "fakevllm simulator: no route "+r.Method+" "+r.URL.Path)
	})
	return s, nil
}

// Config returns a copy of the effective configuration (defaults applied).
func (s *Server) Config() Config { return s.cfg }

// SetHealthy sets what GET /health reports: 200 when true (the initial state), 503 when
// false. Other routes keep serving either way (it simulates a failing health check).
// Safe for concurrent use.
func (s *Server) SetHealthy(ok bool) { s.healthy.Store(ok) }

// Healthy reports the state set by SetHealthy. Safe for concurrent use; one atomic load.
func (s *Server) Healthy() bool { return s.healthy.Load() }

// Stats returns a snapshot of the counters. Safe for concurrent use; fields are read one
// by one, so a snapshot taken under load may be slightly inconsistent across fields.
func (s *Server) Stats() Stats {
	running, waiting := s.slots.counts()
	blocks, evicted := s.cache.stats()
	return Stats{
		Requests:         s.requests.Load(),
		Completed:        s.completed.Load(),
		Cancelled:        s.cancelled.Load(),
		Rejected:         s.rejected.Load(),
		PromptTokens:     s.promptTokens.Load(),
		QueriedTokens:    s.queriedTokens.Load(),
		CachedTokens:     s.cachedTokens.Load(),
		CompletionTokens: s.completionTokens.Load(),
		CacheBlocks:      blocks,
		EvictedBlocks:    evicted,
		Running:          running,
		Waiting:          waiting,
	}
}

// Registry returns the Server's own Prometheus registry (served on GET /metrics), e.g. to
// gather it directly in tests.
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// ServeHTTP implements http.Handler. Every response carries X-Fakevllm: simulator and
// X-Fakevllm-Backend: Config.ID.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set(HeaderSimulator, "simulator")
	h.Set(HeaderBackend, s.cfg.ID)
	s.mux.ServeHTTP(w, r)
}

// ---- simple routes ----

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		s.methodNotAllowed(w, r, "GET, HEAD")
		return
	}
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
		Root    string `json:"root"`
	}
	writeJSON(w, http.StatusOK, struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{{ID: s.cfg.Model, Object: "model", Created: s.created, OwnedBy: "fakevllm-simulator", Root: s.cfg.Model}}})
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		s.methodNotAllowed(w, r, "GET, HEAD")
		return
	}
	if !s.healthy.Load() {
		s.writeError(w, http.StatusServiceUnavailable, "unhealthy", "fakevllm simulator: marked unhealthy")
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		s.methodNotAllowed(w, r, "GET, HEAD")
		return
	}
	s.metrics.ServeHTTP(w, r)
}
