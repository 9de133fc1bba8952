package gateway_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// A session, parent session, tier or tenant header sent twice with different values is a
// 400 conflicting_header, from ServeHTTP and from Decide: the gateway reads the first
// value, a proxy in front reading the last would disagree. (Before: the first value was
// used silently, so "a, b" and "b, a" went to different backends.) Identical copies, and
// differing copies of a header the gateway does not read, pass.
func TestConflictingDuplicateHeaders(t *testing.T) {
	g, _ := testGateway(t, "affinity: {tiers: {batch: {sticky_ttl_seconds: 60}}}\ntenant: {header: X-Tenant-ID}\n")
	tests := []struct {
		name    string
		headers [][2]string
		code    string // "": 200
	}{
		{"one session header", [][2]string{{"X-Session-ID", "a"}}, ""},
		{"identical session copies", [][2]string{{"X-Session-ID", "a"}, {"X-Session-Id", " a"}}, ""},
		{"differing session copies", [][2]string{{"X-Session-ID", "a"}, {"X-Session-ID", "b"}}, "conflicting_header"},
		{"an empty copy first", [][2]string{{"X-Session-ID", ""}, {"X-Session-ID", "b"}}, "conflicting_header"},
		{"differing copies of a later session header", [][2]string{{"X-Opencode-Session", "a"}, {"X-Opencode-Session", "b"}}, "conflicting_header"},
		{"two session headers (the first in order wins)", [][2]string{{"X-Session-ID", "a"}, {"Session-Id", "b"}}, ""},
		{"differing parent copies", [][2]string{{"X-Session-ID", "a"}, {"X-Parent-Session-ID", "p"}, {"X-Parent-Session-ID", "q"}}, "conflicting_header"},
		{"identical tier copies", [][2]string{{"X-Session-ID", "a"}, {"X-Agent-Serve-Tier", "batch"}, {"X-Agent-Serve-Tier", "batch"}}, ""},
		{"differing tier copies", [][2]string{{"X-Session-ID", "a"}, {"X-Agent-Serve-Tier", "batch"}, {"X-Agent-Serve-Tier", "default"}}, "conflicting_header"},
		{"differing tenant copies", [][2]string{{"X-Session-ID", "a"}, {"X-Tenant-ID", "t1"}, {"X-Tenant-ID", "t2"}}, "conflicting_header"},
		{"identical tenant copies", [][2]string{{"X-Session-ID", "a"}, {"X-Tenant-ID", "t1"}, {"X-Tenant-ID", "t1"}}, ""},
		{"an unread header", [][2]string{{"X-Session-ID", "a"}, {"X-Other", "1"}, {"X-Other", "2"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := func() *http.Request {
				r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
				r.Header.Set("Content-Type", "application/json")
				for _, h := range tt.headers {
					r.Header.Add(h[0], h[1])
				}
				return r
			}
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, req())
			d, err := g.Decide(req(), []byte(`{"model":"m"}`), nil)
			if tt.code == "" {
				assert.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
				require.NoError(t, err)
				d.Done()
				return
			}
			assert.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
			assert.Equal(t, tt.code, errorCodeOf(t, rec.Body.String()))
			assert.Contains(t, rec.Body.String(), "different values")
			assert.NotContains(t, rec.Body.String(), "t1", "a tenant identity is never echoed")
			var re *gateway.RequestError
			require.True(t, errors.As(err, &re), "Decide: %v", err)
			assert.Equal(t, http.StatusBadRequest, re.Status)
			assert.Equal(t, tt.code, re.Code)
			assert.ErrorIs(t, err, gateway.ErrRequest)
		})
	}
}

// With tenant.api_key the bearer key of Authorization is the tenant: differing copies are
// a 400 conflicting_header like a tenant header's (the key is never echoed); identical
// copies pass, and without api_key Authorization is not the gateway's to judge. (Before:
// the first copy scoped the request silently.)
func TestConflictingAuthorization(t *testing.T) {
	tests := []struct {
		name   string
		extra  string
		values []string
		want   int
	}{
		{"api_key, differing keys", "tenant: {api_key: true}\n", []string{"Bearer key-a", "Bearer key-b"}, http.StatusBadRequest},
		{"api_key, identical keys", "tenant: {api_key: true}\n", []string{"Bearer key-a", " Bearer key-a"}, http.StatusOK},
		{"api_key with a tenant header, differing keys", "tenant: {api_key: true, header: X-Tenant}\n", []string{"Bearer key-a", "Bearer key-b"}, http.StatusBadRequest},
		{"tenant header only: Authorization not read", "tenant: {header: X-Tenant}\n", []string{"Bearer key-a", "Bearer key-b"}, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, _ := testGateway(t, tt.extra)
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("X-Session-ID", "a")
			for _, v := range tt.values {
				r.Header.Add("Authorization", v)
			}
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, r)
			require.Equal(t, tt.want, rec.Code, rec.Body.String())
			if tt.want == http.StatusBadRequest {
				assert.Equal(t, "conflicting_header", errorCodeOf(t, rec.Body.String()))
				assert.Contains(t, rec.Body.String(), "Authorization")
				assert.NotContains(t, rec.Body.String(), "key-", "a key is never echoed")
			}
		})
	}
}

// The conflict message names the header as configured (X-Session-ID, X-Tenant-ID), not
// in its canonical form (X-Session-Id), whichever spelling the client sent.
func TestConflictNamesHeaderAsConfigured(t *testing.T) {
	g, _ := testGateway(t, "tenant: {header: X-Tenant-ID}\n")
	for _, tt := range []struct{ header, want string }{
		{"x-session-id", "header X-Session-ID sent 2 times"},
		{"X-TENANT-ID", "header X-Tenant-ID sent 2 times"},
	} {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
		r.Header.Set("Content-Type", "application/json")
		if tt.header != "x-session-id" {
			r.Header.Set("X-Session-ID", "s")
		}
		r.Header.Add(tt.header, "a")
		r.Header.Add(tt.header, "b")
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, r)
		require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
		assert.Contains(t, rec.Body.String(), tt.want)
	}
}
