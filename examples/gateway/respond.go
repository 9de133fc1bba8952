package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httputil"
	"strconv"
)

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
