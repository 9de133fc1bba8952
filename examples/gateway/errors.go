package gateway

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"

	"github.com/agentserve/sessionaffinity/affinity"
)

// proxyError answers a request whose backend failed before its response was forwarded
// (the ReverseProxy's ErrorHandler): a JSON 502 or 504 naming the backend of the last
// attempt and a short reason (failureReason: never an address nor the Go error), whose
// lease ends with err. It logs one Warn line with the backend and the whole error,
// unless err is a warnedError (logged already where it happened: Debug here) or the
// client went away (nothing is answered or logged). An attempt the end of Serve's drain
// cut (errDrainCut) is no backend failure: a JSON 503 "shutdown" with Retry-After,
// logged at Info as the drain's cut.
func (g *Gateway) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil { // the client went away
		return
	}
	if st := routeFrom(r.Context()); st != nil {
		b, hit := st.current()
		st.release(usage{}, err)
		w.Header().Set(HeaderBackend, b.id)
		w.Header().Set(HeaderAffinityHit, strconv.FormatBool(hit))
		if errors.Is(err, errDrainCut) { // the end of Serve's drain: not the backend's failure
			g.log.Info("request cut by the shutdown drain", "backend", b.id, "status", http.StatusServiceUnavailable)
			w.Header().Set("Retry-After", strconv.Itoa(st.rt.cfg.Limits.RetryAfterSeconds))
			writeError(w, http.StatusServiceUnavailable, "shutdown",
				"the gateway is shutting down: the request was cut at the end of its drain; retry")
			return
		}
		level := slog.LevelWarn
		if errors.As(err, new(warnedError)) {
			level = slog.LevelDebug
		}
		g.log.Log(r.Context(), level, "backend request failed", "backend", b.id, "err", err)
		status, code := proxyStatus(err)
		writeError(w, status, code, fmt.Sprintf("backend %q: %s", b.id, failureReason(err)))
		return
	}
	status, code := proxyStatus(err)
	writeError(w, status, code, "backend request failed: "+failureReason(err))
}

// failureReason is what a client is told of a backend failure: a short reason (with the
// gateway's own bound for its timeouts: "timed out: sent no response headers within
// 5m0s"), never an address, a URL or the Go error, which name the backend's host and port ("dial tcp
// 10.0.0.7:8000: connect: connection refused"), its TLS certificate's names, or bytes
// of a malformed answer. The whole error goes to the gateway's log line instead.
// Decision: the backend is named by its configured ID, which the client sees in
// X-Agent-Serve-Backend anyway.
func failureReason(err error) string {
	var (
		cverr  *tls.CertificateVerificationError
		rherr  tls.RecordHeaderError
		alert  tls.AlertError
		unauth x509.UnknownAuthorityError
		host   x509.HostnameError
		inval  x509.CertificateInvalidError
	)
	var te *timeoutError // the gateway's own bound: its words name no address
	switch {
	case errors.As(err, &te):
		return "timed out: " + te.what + " " + te.d.String()
	case errors.Is(err, ErrBackendTimeout) || isTimeout(err):
		return "timed out"
	case errors.Is(err, ErrBadResponse):
		return "malformed response"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.As(err, &cverr), errors.As(err, &rherr), errors.As(err, &alert), errors.As(err, &unauth),
		errors.As(err, &host), errors.As(err, &inval):
		return "TLS handshake failed"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return "connection closed"
	}
	return "request failed"
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
	if errors.Is(err, errDrainCut) {
		return http.StatusServiceUnavailable, "shutdown"
	}
	if errors.Is(err, ErrBackendTimeout) || isTimeout(err) {
		return http.StatusGatewayTimeout, "backend_timeout"
	}
	if errors.Is(err, ErrBadResponse) {
		return http.StatusBadGateway, "backend_bad_response"
	}
	return http.StatusBadGateway, "backend_unavailable"
}

// routingError answers a request the Scheduler could not route (err from choose or
// unbind): the status and code of classify, the message of [RequestError.ClientMessage];
// an unexpected failure (routing_error) is logged at Error with its cause. A 503
// no_backend_available carries Retry-After: limits.retry_after_seconds, as the 503
// overloaded does: every backend down or draining is a temporary state (RFC 9110,
// section 10.2.3), and the OpenAI and Anthropic SDKs wait that long before their retry.
func (g *Gateway) routingError(w http.ResponseWriter, rt *routing, err error) {
	status, code := classify(err)
	if code == "routing_error" {
		g.log.Error("routing failed", "err", err)
	}
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(rt.cfg.Limits.RetryAfterSeconds))
	}
	writeError(w, status, code, (&RequestError{status, code, err}).ClientMessage())
}

// clientText is err's message for a client: without ErrRequest's and the library's
// package prefixes ("gateway: bad request: ", "affinity: "), e.g. "no eligible backend:
// all 3 candidates are down" (tester30: SDK users saw the library's error text).
func clientText(err error) string {
	msg := strings.TrimPrefix(err.Error(), ErrRequest.Error()+": ")
	return strings.TrimPrefix(msg, "affinity: ")
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

// errorBody is the gateway's JSON error: the OpenAI shape {"error":{"message","type",
// "code"}} with a top-level "type":"error", which makes it the Anthropic Messages API's
// shape {"type":"error","error":{"type","message"}} as well, so that the OpenAI and the
// Anthropic SDKs both read it as an error of their own format (tester29: on /v1/messages
// the Anthropic SDK saw a body of another API's shape); an OpenAI client ignores the
// extra member.
type errorBody struct {
	Type  string      `json:"type"` // always "error"
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    string `json:"code"`
}

// writeError writes the gateway's JSON error (errorBody):
// {"type":"error","error":{"message","type","code"}}.
// On the gateway's own writer it marks the response as gateway-generated (metrics).
func writeError(w http.ResponseWriter, status int, code, msg string) {
	if ow, ok := w.(*outcomeWriter); ok {
		ow.gateway = true
	}
	typ := "invalid_request_error"
	if status >= 500 {
		typ = "server_error"
	}
	writeJSON(w, status, errorBody{Type: "error", Error: errorDetail{Message: msg, Type: typ, Code: code}})
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
