package gateway

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The active prober has a transport of its own whose idle connections outlive the probe
// interval (before: the backend transport, whose 4-s idle timeout closed every probe's
// connection before the next 5-s probe, so every probe dialled anew and left a socket in
// TIME_WAIT), rebuilt when the interval changes; probes reuse one connection per backend.
func TestProbeTransportReusesConnections(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	cfg := func(interval string) Config {
		c, err := ParseConfig([]byte("listen: 127.0.0.1:0\nbackends:\n  - {id: a, url: " + srv.URL + "}\n" +
			"health: {enabled: true, interval_seconds: " + interval + "}\n"))
		require.NoError(t, err)
		return c
	}
	g, err := New(cfg("5"))
	require.NoError(t, err)
	t.Cleanup(g.Close)

	tr := g.probeTr
	require.NotNil(t, tr)
	assert.NotSame(t, g.base, http.RoundTripper(tr), "not the backend transport")
	assert.Equal(t, 10*time.Second, tr.IdleConnTimeout, "twice the interval")
	assert.Zero(t, tr.MaxIdleConns, "no total cap")
	for range 5 {
		g.ProbeOnce(context.Background())
	}
	assert.Equal(t, int64(1), conns.Load(), "one connection for five probes")

	require.NoError(t, g.Reload(cfg("7")))
	assert.Equal(t, 14*time.Second, g.probeTr.IdleConnTimeout, "rebuilt for the new interval")
	assert.NotSame(t, tr, g.probeTr)
}
