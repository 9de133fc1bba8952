package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// Run reclaims expired bindings on every sweep tick, with no traffic at all.
func TestRunSweepsExpiredBindings(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(backend.Close)

	cfg, err := gateway.ParseConfig([]byte("affinity: {sticky_ttl_seconds: 10}\nbackends:\n  - {id: b0, url: \"" + backend.URL + "\"}\n"))
	require.NoError(t, err)
	clk := affinitytest.NewClock(time.Unix(1_700_000_000, 0))
	ticks := make(chan time.Time)
	g, err := gateway.New(cfg, gateway.WithSchedulerOptions(affinity.WithClock(clk)), gateway.WithSweepTicks(ticks))
	require.NoError(t, err)
	t.Cleanup(g.Close)

	for _, sid := range []string{"s1", "s2", "s3"} {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Session-ID", sid)
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	}
	require.Equal(t, 3, g.Scheduler().Len())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()

	ticks <- clk.Now() // within the TTL: nothing to reclaim
	clk.Advance(10 * time.Second)
	ticks <- clk.Now() // now >= lastUse + TTL: all three go
	ticks <- clk.Now() // an unbuffered send returns once the previous sweep has finished
	assert.Equal(t, 0, g.Scheduler().Len())
	assert.Equal(t, uint64(3), g.Scheduler().Stats().Expired)

	cancel()
	require.NoError(t, <-done)
}

func TestSweepSecondsConfig(t *testing.T) {
	base := "backends:\n  - {id: b0, url: \"http://127.0.0.1:9\"}\n"
	cfg, err := gateway.ParseConfig([]byte(base))
	require.NoError(t, err)
	assert.Equal(t, gateway.DefaultSweepSeconds, cfg.SweepSeconds)
	for _, bad := range []string{"-1", ".nan", ".inf"} {
		_, err := gateway.ParseConfig([]byte(base + "sweep_seconds: " + bad + "\n"))
		assert.ErrorIs(t, err, gateway.ErrSweepInterval, bad)
		assert.ErrorIs(t, err, gateway.ErrInvalidConfig, bad)
	}
}
