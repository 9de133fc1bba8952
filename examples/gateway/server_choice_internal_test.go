package gateway

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway/internal/h1"
)

// TestServerConfig: server selects Serve's server (nethttp when omitted), anything else
// is ErrServer, and a change needs a restart.
func TestServerConfig(t *testing.T) {
	base := Config{Backends: []BackendConfig{{ID: "a", URL: "http://127.0.0.1:1"}},
		Timeouts: TimeoutsConfig{ReadHeaderSeconds: 3, ClientIdleSeconds: 7}, Limits: LimitsConfig{MaxHeaderBytes: 1000}}
	for _, tc := range []struct {
		name   string
		direct bool
		ok     bool
	}{{"", false, true}, {"nethttp", false, true}, {"direct", true, true}, {"Direct", true, true}, {"fast", false, false}} {
		t.Run("server="+tc.name, func(t *testing.T) {
			cfg := base
			cfg.Server = tc.name
			g, err := New(cfg)
			if !tc.ok {
				assert.ErrorIs(t, err, ErrServer)
				assert.ErrorIs(t, err, ErrInvalidConfig)
				return
			}
			require.NoError(t, err)
			defer g.Close()
			srv := g.newServer(g, context.Background())
			if tc.direct {
				s, ok := srv.(*h1.Server)
				require.True(t, ok, "%T", srv)
				want := g.HTTPServer()
				assert.Equal(t, want.ReadHeaderTimeout, s.ReadHeaderTimeout)
				assert.Equal(t, want.IdleTimeout, s.IdleTimeout)
				assert.Equal(t, want.MaxHeaderBytes, s.MaxHeaderBytes)
			} else {
				_, ok := srv.(*http.Server)
				assert.True(t, ok, "%T", srv)
			}
			next := cfg
			next.Server = map[bool]string{true: "nethttp", false: "direct"}[tc.direct]
			err = g.Reload(next)
			assert.ErrorIs(t, err, ErrReloadNeedsRestart)
			if tc.name == "" {
				assert.ErrorContains(t, err, `server "nethttp" -> "direct"`)
			}
		})
	}
}
