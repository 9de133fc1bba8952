package health_test

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/health"
)

func TestProbeConfigValidation(t *testing.T) {
	good := []health.Target{{ID: "b", URL: "http://10.0.0.5:8000"}}
	tests := []struct {
		name    string
		cfg     health.ProbeConfig
		targets []health.Target
		wantErr error
		wantMsg string // substring naming the field/target and the value
	}{
		{name: "zero config is valid", targets: good},
		{name: "no targets is valid"},
		{name: "explicit values", cfg: health.ProbeConfig{Path: "/h", IntervalSeconds: 0.5, TimeoutSeconds: 0.1, FailureThreshold: 1, SuccessThreshold: 1}, targets: good},
		{name: "negative interval", cfg: health.ProbeConfig{IntervalSeconds: -1}, wantErr: health.ErrInvalidProbeConfig, wantMsg: "interval_seconds -1"},
		{name: "NaN interval", cfg: health.ProbeConfig{IntervalSeconds: math.NaN()}, wantErr: health.ErrInvalidProbeConfig, wantMsg: "interval_seconds NaN"},
		{name: "infinite timeout", cfg: health.ProbeConfig{TimeoutSeconds: math.Inf(1)}, wantErr: health.ErrInvalidProbeConfig, wantMsg: "timeout_seconds +Inf"},
		{name: "overflowing timeout", cfg: health.ProbeConfig{TimeoutSeconds: 1e10}, wantErr: health.ErrInvalidProbeConfig, wantMsg: "timeout_seconds 1e+10"},
		{name: "sub-nanosecond interval", cfg: health.ProbeConfig{IntervalSeconds: 1e-12}, wantErr: health.ErrInvalidProbeConfig, wantMsg: "interval_seconds 1e-12"},
		{name: "negative failure threshold", cfg: health.ProbeConfig{FailureThreshold: -1}, wantErr: health.ErrInvalidProbeConfig, wantMsg: "failure_threshold -1"},
		{name: "negative success threshold", cfg: health.ProbeConfig{SuccessThreshold: -2}, wantErr: health.ErrInvalidProbeConfig, wantMsg: "success_threshold -2"},
		{name: "relative path", cfg: health.ProbeConfig{Path: "health"}, wantErr: health.ErrInvalidProbeConfig, wantMsg: `path "health"`},
		{name: "path with a space", cfg: health.ProbeConfig{Path: "/h h"}, wantErr: health.ErrInvalidProbeConfig, wantMsg: `path "/h h" has byte ' ' at offset 2`},
		{name: "path with a control byte", cfg: health.ProbeConfig{Path: "/h\x01"}, wantErr: health.ErrInvalidProbeConfig, wantMsg: `offset 2`},
		{name: "path with NUL", cfg: health.ProbeConfig{Path: "/\x00"}, wantErr: health.ErrInvalidProbeConfig, wantMsg: `offset 1`},
		{name: "path with DEL", cfg: health.ProbeConfig{Path: "/\x7f"}, wantErr: health.ErrInvalidProbeConfig, wantMsg: `offset 1`},
		{name: "path with non-ASCII", cfg: health.ProbeConfig{Path: "/gesundheit-\u00fc"}, wantErr: health.ErrInvalidProbeConfig, wantMsg: `offset 12`},
		{name: "path with a fragment", cfg: health.ProbeConfig{Path: "/h#x"}, wantErr: health.ErrInvalidProbeConfig, wantMsg: `offset 2`},
		{name: "path with a bad escape", cfg: health.ProbeConfig{Path: "/h%zz"}, wantErr: health.ErrInvalidProbeConfig, wantMsg: `not a valid URL path`},
		{name: "escaped space and a query", cfg: health.ProbeConfig{Path: "/my%20health?full=1"}, targets: good},
		{name: "empty target ID", targets: []health.Target{{ID: "", URL: "http://h:1"}}, wantErr: health.ErrInvalidTarget, wantMsg: `targets[0] has an empty ID`},
		{name: "duplicate target ID", targets: []health.Target{{ID: "a", URL: "http://h:1"}, {ID: "b", URL: "http://h:2"}, {ID: "a", URL: "http://h:3"}}, wantErr: health.ErrDuplicateTarget, wantMsg: `"a" at targets[0] and targets[2]`},
		{name: "empty URL", targets: []health.Target{{ID: "a", URL: ""}}, wantErr: health.ErrInvalidTarget, wantMsg: `target "a" url ""`},
		{name: "no scheme", targets: []health.Target{{ID: "a", URL: "10.0.0.5:8000"}}, wantErr: health.ErrInvalidTarget, wantMsg: `url "10.0.0.5:8000"`},
		{name: "ftp scheme", targets: []health.Target{{ID: "a", URL: "ftp://h/x"}}, wantErr: health.ErrInvalidTarget, wantMsg: `url "ftp://h/x"`},
		{name: "no host", targets: []health.Target{{ID: "a", URL: "http:///x"}}, wantErr: health.ErrInvalidTarget, wantMsg: `url "http:///x"`},
		{name: "query", targets: []health.Target{{ID: "a", URL: "http://h/?x=1"}}, wantErr: health.ErrInvalidTarget, wantMsg: `url "http://h/?x=1"`},
		{name: "unparsable", targets: []health.Target{{ID: "a", URL: "http://h:port"}}, wantErr: health.ErrInvalidTarget, wantMsg: `url "http://h:port"`},
		// Credentials are refused, and the error never repeats the password (tester27).
		{name: "user:password", targets: []health.Target{{ID: "a", URL: "http://op:s3cret@h:1"}}, wantErr: health.ErrInvalidTarget, wantMsg: `url "http://op:xxxxx@h:1"`},
		{name: "user:password, unparsable", targets: []health.Target{{ID: "a", URL: "http://op:s3 cret@h:port/x"}}, wantErr: health.ErrInvalidTarget, wantMsg: `url "http://xxxxx@h:port/x"`},
		{name: "user:password, empty ID", targets: []health.Target{{ID: "", URL: "http://op:s3cret@h:1"}}, wantErr: health.ErrInvalidTarget, wantMsg: `(url "http://op:xxxxx@h:1")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := health.NewProber(tt.cfg, tt.targets)
			if tt.wantErr == nil {
				require.NoError(t, err)
				require.NotNil(t, p)
				require.NoError(t, tt.cfg.Validate())
				return
			}
			require.ErrorIs(t, err, tt.wantErr)
			assert.Nil(t, p)
			assert.Contains(t, err.Error(), tt.wantMsg)
			assert.NotContains(t, err.Error(), "s3", "no password in the error")
			if tt.wantErr == health.ErrInvalidProbeConfig {
				assert.ErrorIs(t, tt.cfg.Validate(), health.ErrInvalidProbeConfig)
			}
			assert.True(t, strings.HasPrefix(err.Error(), "health: "), err.Error())
		})
	}
}

func TestCheck(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			_, _ = w.Write([]byte("ok"))
		case "/nocontent":
			w.WriteHeader(http.StatusNoContent)
		case "/fail":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/stall":
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()

	tests := []struct {
		name   string
		url    string
		client *http.Client
		want   bool
	}{
		{"200", srv.URL + "/ok", srv.Client(), true},
		{"204 with the default client", srv.URL + "/nocontent", nil, true},
		{"503", srv.URL + "/fail", srv.Client(), false},
		{"404", srv.URL + "/missing", srv.Client(), false},
		{"body stalls past the deadline", srv.URL + "/stall", srv.Client(), false},
		{"connection refused", closedURL + "/ok", nil, false},
		{"malformed URL", "http://[::1", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			timeout := 10 * time.Second // generous: only the stalled body should reach it
			if strings.HasSuffix(tt.url, "/stall") {
				timeout = 50 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			assert.Equal(t, tt.want, health.Check(ctx, tt.client, tt.url))
		})
	}
}
