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
	"time"
)

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
	PromptTokens        int                  `json:"prompt_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	PromptTokensDetails *promptTokensDetails `json:"prompt_tokens_details"` // nil: null (Config.NoPromptTokensDetails)
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
		Usage:             s.usage(j),
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

// usage is the usage object of j's response: prompt_tokens_details is null with
// Config.NoPromptTokensDetails.
func (s *Server) usage(j *job) usage {
	u := usage{
		PromptTokens:     j.promptTokens,
		CompletionTokens: j.outTokens,
		TotalTokens:      j.promptTokens + j.outTokens,
	}
	if !s.cfg.NoPromptTokensDetails {
		u.PromptTokensDetails = &promptTokensDetails{CachedTokens: j.cachedTokens}
	}
	return u
}

// scale returns n * per * TimeScale, saturating at the largest Duration.
func (s *Server) scale(n int, per time.Duration) time.Duration {
	d := float64(n) * float64(per) * s.cfg.TimeScale
	if d >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(d)
}
