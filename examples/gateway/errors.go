package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/agentserve/sessionaffinity/affinity"
)

// proxyError answers a request whose backend failed before its response was forwarded
// (the ReverseProxy's ErrorHandler): a JSON 502 or 504 naming the backend of the last
// attempt, whose lease ends with err. It logs one Warn line with the backend, unless err
// is a warnedError (logged already where it happened: Debug here) or the client went
// away (nothing is answered or logged).
func (g *Gateway) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil { // the client went away
		return
	}
	if st := routeFrom(r.Context()); st != nil {
		b, hit := st.current()
		st.release(usage{}, err)
		w.Header().Set(HeaderBackend, b.id)
		w.Header().Set(HeaderAffinityHit, strconv.FormatBool(hit))
		level := slog.LevelWarn
		if errors.As(err, new(warnedError)) {
			level = slog.LevelDebug
		}
		g.log.Log(r.Context(), level, "backend request failed", "backend", b.id, "err", err)
		status, code := proxyStatus(err)
		writeError(w, status, code, fmt.Sprintf("backend %q: %v", b.id, err))
		return
	}
	status, code := proxyStatus(err)
	writeError(w, status, code, err.Error())
}

// warnedError is a backend failure already logged at Warn with its backend where it was
// seen — a failed read of the response body ("backend response body read failed") or a
// stall ("backend stream stalled", at Info when not counted) — so that one event makes
// one line.
type warnedError struct{ error }

// Unwrap returns the failure.
func (e warnedError) Unwrap() error { return e.error }

// proxyStatus maps a failed backend request to a status: 504 backend_timeout for a
// timeout (response headers, dial), 502 backend_bad_response for a malformed response
// ([ErrBadResponse]), 502 backend_unavailable otherwise.
func proxyStatus(err error) (int, string) {
	if errors.Is(err, ErrBackendTimeout) || isTimeout(err) {
		return http.StatusGatewayTimeout, "backend_timeout"
	}
	if errors.Is(err, ErrBadResponse) {
		return http.StatusBadGateway, "backend_bad_response"
	}
	return http.StatusBadGateway, "backend_unavailable"
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
// On the gateway's own writer it marks the response as gateway-generated (metrics).
func writeError(w http.ResponseWriter, status int, code, msg string) {
	if ow, ok := w.(*outcomeWriter); ok {
		ow.gateway = true
	}
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
