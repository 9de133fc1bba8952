package fakevllm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
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

// ---- errors ----

type apiError struct {
	Error apiErrorBody `json:"error"`
}

type apiErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

func (s *Server) writeError(w http.ResponseWriter, status int, code, msg string) {
	if status >= 400 && status < 500 {
		s.rejected.Add(1)
	}
	typ := "invalid_request_error"
	if status >= 500 {
		typ = "server_error"
	}
	writeJSON(w, status, apiError{Error: apiErrorBody{Message: msg, Type: typ, Code: code}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil { // cannot happen for the types used here
		http.Error(w, `{"error":{"message":"fakevllm: encoding failed","type":"server_error","code":"internal"}}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	s.writeError(w, http.StatusMethodNotAllowed, "method_not_allowed",
		fmt.Sprintf("fakevllm simulator: method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow))
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

// ---- chat completions ----

type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []Message       `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	CacheSalt           string          `json:"-"` // vLLM's per-request prefix-cache salt (exactCacheSalt)
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type usage struct {
	PromptTokens        int                 `json:"prompt_tokens"`
	CompletionTokens    int                 `json:"completion_tokens"`
	TotalTokens         int                 `json:"total_tokens"`
	PromptTokensDetails promptTokensDetails `json:"prompt_tokens_details"`
}

type promptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatChoice struct {
	Index        int         `json:"index"`
	Message      chatMessage `json:"message"`
	Logprobs     *struct{}   `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
}

type chatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []chatChoice `json:"choices"`
	Usage             usage        `json:"usage"`
	SystemFingerprint string       `json:"system_fingerprint"`
}

type chunkDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chunkChoice struct {
	Index        int        `json:"index"`
	Delta        chunkDelta `json:"delta"`
	Logprobs     *struct{}  `json:"logprobs"`
	FinishReason *string    `json:"finish_reason"`
}

type chatChunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	SystemFingerprint string        `json:"system_fingerprint"`
	Choices           []chunkChoice `json:"choices"`
	Usage             *usage        `json:"usage,omitempty"`
}

// job is one validated request on its way through queue, prefill and decode.
type job struct {
	id           string
	model        string
	created      int64
	keys         []blockKey
	promptTokens int
	cachedTokens int
	outTokens    int
	finish       string
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		s.methodNotAllowed(w, r, "POST")
		return
	}
	req, status, code, err := decodeChat(w, r)
	if err != nil {
		s.writeError(w, status, code, "fakevllm simulator: "+err.Error())
		return
	}
	j, err := s.newJob(req)
	if err != nil {
		s.writeError(w, http.StatusBadRequest, "invalid_value", "fakevllm simulator: "+err.Error())
		return
	}
	s.requests.Add(1)
	s.promptTokens.Add(uint64(j.promptTokens))

	ctx := r.Context()
	if err := s.slots.acquire(ctx); err != nil {
		s.cancelled.Add(1)
		return // client gone: nobody to answer
	}
	defer s.slots.release()

	if err := s.prefill(ctx, j); err != nil {
		s.cancelled.Add(1)
		return
	}
	if req.Stream {
		s.streamDecode(ctx, w, j, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		return
	}
	if err := s.sleep(ctx, s.scale(j.outTokens, s.cfg.DecodePerToken)); err != nil {
		s.cancelled.Add(1)
		return
	}
	s.completionTokens.Add(uint64(j.outTokens))
	writeJSON(w, http.StatusOK, chatCompletion{
		ID:      j.id,
		Object:  "chat.completion",
		Created: j.created,
		Model:   j.model,
		Choices: []chatChoice{{
			Message:      chatMessage{Role: "assistant", Content: completionText(j.outTokens)},
			FinishReason: j.finish,
		}},
		Usage:             j.usage(),
		SystemFingerprint: "fakevllm-simulator",
	})
	s.completed.Add(1)
}

// decodeChat reads and validates the body, returning the HTTP status and error code to
// answer with on failure.
func decodeChat(w http.ResponseWriter, r *http.Request) (chatRequest, int, string, error) {
	var req chatRequest
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return req, http.StatusRequestEntityTooLarge, "request_too_large",
				fmt.Errorf("request body exceeds %d bytes", MaxRequestBodyBytes)
		}
		return req, http.StatusBadRequest, "invalid_body", fmt.Errorf("reading request body: %w", err)
	}
	if !jsonContentType(r.Header.Get("Content-Type")) {
		return req, http.StatusUnprocessableEntity, "invalid_body",
			fmt.Errorf("Content-Type %q: the body is read as JSON only without a Content-Type or with a JSON one (FastAPI's rule, as in vLLM)", r.Header.Get("Content-Type"))
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return req, http.StatusBadRequest, "invalid_json", fmt.Errorf("malformed JSON body: %w", err)
	}
	if req.CacheSalt, err = exactCacheSalt(body); err != nil {
		return req, http.StatusUnprocessableEntity, "invalid_value", err
	}
	if err := validateMessages(req.Messages); err != nil {
		return req, http.StatusBadRequest, "invalid_messages", err
	}
	return req, 0, "", nil
}

// jsonContentType reports whether FastAPI, which parses vLLM's request bodies, reads a
// body of this Content-Type as JSON: none at all, or application/json or
// application/<x>+json.
func jsonContentType(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")
}

// exactCacheSalt returns the top-level "cache_salt" of a JSON object body as vLLM's
// request model reads it: by its exact name (pydantic is case-sensitive, where Go's
// encoding/json would also take "CACHE_SALT" or "cache_ſalt"), the last of duplicate
// keys; "" when absent or null. A value that is not a string is an error.
func exactCacheSalt(body []byte) (string, error) {
	var top map[string]json.RawMessage // keys unescaped, matched exactly; the last duplicate wins
	if err := json.Unmarshal(body, &top); err != nil {
		return "", fmt.Errorf("malformed JSON body: %w", err)
	}
	raw, ok := top["cache_salt"]
	if !ok {
		return "", nil
	}
	var salt *string
	if err := json.Unmarshal(raw, &salt); err != nil {
		return "", fmt.Errorf("cache_salt: not a string: %s", raw)
	}
	if salt == nil {
		return "", nil
	}
	return *salt, nil
}

func (s *Server) newJob(req chatRequest) (*job, error) {
	out, finish := s.cfg.DefaultMaxTokens, "stop"
	for _, p := range []struct {
		name string
		v    *int
	}{{"max_tokens", req.MaxTokens}, {"max_completion_tokens", req.MaxCompletionTokens}} {
		if p.v == nil {
			continue
		}
		if *p.v < 1 || *p.v > MaxOutputTokens {
			return nil, fmt.Errorf("%s %d out of range 1..%d", p.name, *p.v, MaxOutputTokens)
		}
		out, finish = *p.v, "length"
	}
	model := req.Model
	if model == "" {
		model = s.cfg.Model
	}
	prompt := RenderPrompt(req.Tools, req.Messages)
	return &job{
		id:           "chatcmpl-fakevllm-" + s.cfg.ID + "-" + strconv.FormatUint(s.seq.Add(1), 10),
		model:        model,
		created:      s.now().Unix(),
		keys:         blockKeys(prompt, s.cfg.BlockTokens*BytesPerToken, req.CacheSalt),
		promptTokens: EstimateTokens(prompt),
		outTokens:    out,
		finish:       finish,
	}, nil
}

// prefill looks the prompt up in the prefix cache, waits for the uncached tokens and then
// inserts every full block. A prompt that is entirely cached still computes its last
// block (cached_tokens < prompt_tokens), as vLLM does.
func (s *Server) prefill(ctx context.Context, j *job) error {
	limit := len(j.keys)
	if limit*s.cfg.BlockTokens >= j.promptTokens {
		limit--
	}
	j.cachedTokens = s.cache.lookup(j.keys, limit) * s.cfg.BlockTokens
	s.queriedTokens.Add(uint64(j.promptTokens))
	s.cachedTokens.Add(uint64(j.cachedTokens))
	if err := s.sleep(ctx, s.scale(j.promptTokens-j.cachedTokens, s.cfg.PrefillPerToken)); err != nil {
		return err
	}
	s.cache.insert(j.keys)
	return nil
}

func (s *Server) streamDecode(ctx context.Context, w http.ResponseWriter, j *job, includeUsage bool) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)

	chunk := chatChunk{ID: j.id, Object: "chat.completion.chunk", Created: j.created, Model: j.model, SystemFingerprint: "fakevllm-simulator"}
	send := func(c chunkChoice, u *usage) error {
		chunk.Choices = chunk.Choices[:0]
		if u == nil {
			chunk.Choices = append(chunk.Choices, c)
		}
		chunk.Usage = u
		b, err := json.Marshal(chunk)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return err
		}
		return rc.Flush()
	}
	empty := ""
	if err := send(chunkChoice{Delta: chunkDelta{Role: "assistant", Content: &empty}}, nil); err != nil {
		s.cancelled.Add(1)
		return
	}
	step := s.scale(1, s.cfg.DecodePerToken)
	for i := range j.outTokens {
		if err := s.sleep(ctx, step); err != nil {
			s.cancelled.Add(1)
			return
		}
		piece := tokenText(i)
		s.completionTokens.Add(1)
		if err := send(chunkChoice{Delta: chunkDelta{Content: &piece}}, nil); err != nil {
			s.cancelled.Add(1)
			return
		}
	}
	finish := j.finish
	if err := send(chunkChoice{Delta: chunkDelta{}, FinishReason: &finish}, nil); err != nil {
		s.cancelled.Add(1)
		return
	}
	if includeUsage {
		u := j.usage()
		if err := send(chunkChoice{}, &u); err != nil {
			s.cancelled.Add(1)
			return
		}
	}
	if _, err := io.WriteString(w, "data: [DONE]\n\n"); err != nil {
		s.cancelled.Add(1)
		return
	}
	_ = rc.Flush()
	s.completed.Add(1)
}

func (j *job) usage() usage {
	return usage{
		PromptTokens:        j.promptTokens,
		CompletionTokens:    j.outTokens,
		TotalTokens:         j.promptTokens + j.outTokens,
		PromptTokensDetails: promptTokensDetails{CachedTokens: j.cachedTokens},
	}
}

// scale returns n * per * TimeScale, saturating at the largest Duration.
func (s *Server) scale(n int, per time.Duration) time.Duration {
	d := float64(n) * float64(per) * s.cfg.TimeScale
	if d >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(d)
}

// tokenText is the text of output token i: the simulator marker first, then filler words.
func tokenText(i int) string {
	if i == 0 {
		return SimulatorMarker
	}
	words := [...]string{" simulated", " tokens", " from", " a", " fake", " vLLM", " backend", " only"}
	return words[(i-1)%len(words)]
}

// completionText is the full text of n output tokens (what streaming sends piecewise).
func completionText(n int) string {
	var b []byte
	for i := range n {
		b = append(b, tokenText(i)...)
	}
	return string(b)
}
