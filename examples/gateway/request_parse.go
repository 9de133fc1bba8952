package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// jsonBody reports whether the body of r is read as a JSON object (parseModel's rule,
// which the cache_salt rewrite follows): a POST whose Content-Type is JSON, or whose path
// is a JSON endpoint and whose Content-Type is not multipart, or which has a body or a
// JSON endpoint and no Content-Type.
func jsonBody(r *http.Request, body []byte) bool {
	if r.Method != http.MethodPost {
		return false
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, err := mediaType(ct)
		isJSON := err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
		return isJSON || !strings.HasPrefix(mt, "multipart/") && isJSONEndpoint(r.URL.Path)
	}
	return len(body) > 0 || isJSONEndpoint(r.URL.Path) // not a bodiless POST that claims no type
}

// parseModel extracts the "model" of a JSON request body. The body of a POST request
// must be a JSON object (an empty body is not one) when its Content-Type is JSON, or
// when its path is a JSON endpoint (isJSONEndpoint) and it is not multipart, or when its
// Content-Type is absent and it has a body; other requests are not inspected. top is
// what the scan of such a body found (the stream_usage rewrite reads it: streamusage.go);
// its close is 0 for a request whose body was not read as a JSON object.
func parseModel(r *http.Request, body []byte) (model string, top topMembers, err error) {
	if !jsonBody(r, body) {
		return "", top, nil
	}
	if ce := contentCoding(r.Header); ce != "" {
		return "", top, &contentEncodingError{encoding: ce}
	}
	if len(body) == 0 {
		return "", top, errors.New("malformed JSON request body: empty body")
	}
	if top, obj, _ := scanJSON(body); obj {
		// The last top-level "model" (exact key after unescaping, as vLLM reads it): a
		// plain string needs no decoding; one with escapes is decoded alone.
		switch v := top.model; {
		case v == nil || string(v) == "null":
			return "", top, nil
		case len(v) >= 2 && v[0] == '"' && bytes.IndexByte(v, '\\') < 0:
			return string(v[1 : len(v)-1]), top, nil
		default:
			var m string // not the named result: taking its address would allocate it on every call
			if err := json.Unmarshal(v, &m); err != nil {
				return "", topMembers{}, fmt.Errorf("malformed JSON request body: \"model\" must be a string, got %s", v)
			}
			return m, top, nil
		}
	}
	// Not a JSON object: encoding/json names what is wrong.
	var req any
	if err := json.Unmarshal(body, &req); err != nil {
		return "", top, fmt.Errorf("malformed JSON request body: %v", err)
	}
	return "", top, fmt.Errorf("malformed JSON request body: must be a JSON object, got %s", jsonKind(req))
}

// jsonKind names the kind of a decoded JSON value as encoding/json's errors do.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "bool"
	case float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	}
	return "object"
}

// contentCoding returns the first content coding of h other than identity, "" if none:
// every Content-Encoding header line and every element of its comma-separated list
// counts (RFC 9110 §8.4: the codings in the order applied), so "identity" on one line
// and "gzip" on the next is a gzipped body. Empty elements are skipped.
func contentCoding(h http.Header) string {
	for _, line := range h.Values("Content-Encoding") {
		for elem := range strings.SplitSeq(line, ",") {
			if c := strings.TrimSpace(elem); c != "" && !strings.EqualFold(c, "identity") {
				return c
			}
		}
	}
	return ""
}

// contentEncodingError: a body the gateway must read to route (parseModel) arrived with a
// Content-Encoding other than identity. The gateway does not decompress request bodies
// (a decision: it would need its own decompression-bomb limits; clients of
// OpenAI-compatible servers send plain JSON), so the client gets a 415.
type contentEncodingError struct{ encoding string }

func (e *contentEncodingError) Error() string {
	return fmt.Sprintf("unsupported Content-Encoding %q: the gateway reads the JSON request body to route it; send it uncompressed (identity)",
		truncate(e.encoding, 64))
}

// bodyStatus maps a parseModel error to an HTTP status and error code: 415
// unsupported_content_encoding for a compressed body, 400 invalid_json otherwise.
func bodyStatus(err error) (int, string) {
	var ce *contentEncodingError
	if errors.As(err, &ce) {
		return http.StatusUnsupportedMediaType, "unsupported_content_encoding"
	}
	return http.StatusBadRequest, "invalid_json"
}

// isJSONEndpoint reports whether path is one of the OpenAI- or Anthropic-compatible POST endpoints
// whose body is JSON whatever Content-Type the client sent (curl -d sends
// application/x-www-form-urlencoded). A trailing slash is ignored, as in isSaltEndpoint.
func isJSONEndpoint(path string) bool {
	path = strings.TrimSuffix(path, "/")
	for _, e := range [...]string{"/chat/completions", "/completions", "/embeddings", "/responses", "/messages"} {
		if strings.HasSuffix(path, e) {
			return true
		}
	}
	return false
}
