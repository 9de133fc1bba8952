package gateway

import (
	"net"
	"net/http"
	"time"

	"github.com/agentserve/sessionaffinity/health"
)

// probeMaxIdlePerHost is how many idle connections the probe transport keeps per
// backend address. One is enough when each backend has its own address (one probe per
// interval), and an address only holds as many idle connections as it had probes at
// once, so the cap costs nothing there. It matters for backends that share an address
// (path prefixes on one server): their probes are spread over 128 slots of the interval,
// so about n/128 of n such backends are probed at once. Measured (1,000 targets on one
// server, 2-s interval, 7 s): a cap of 2 dialled 3,032 connections for 4,000 probes, 16
// dialled 1,000 (the first round's, all at once) and reused them after.
const probeMaxIdlePerHost = 16

// probeBase returns the transport the active prober of rt sends its probes on: the
// [WithTransport] one when given; else a transport of the prober's own, so that probes
// neither compete with proxied requests for the backend transport's idle pool nor lose
// their connection to its idle timeout (backend_idle_conn_seconds, 4 s by default, below
// the 5-s interval: every probe used to dial a new connection and leave one in
// TIME_WAIT). Its idle timeout is twice the probe interval, so a backend's connection is
// reused from one probe to the next and closed once it is no longer probed (a removed
// backend, a probe interval made longer); it keeps at most probeMaxIdlePerHost idle
// connections per backend address and no total cap (one per backend is the point). It is
// rebuilt when the interval changes, and the previous one's idle connections are closed.
// Called by New and, under reloadMu, by reload.
func (g *Gateway) probeBase(rt *routing) http.RoundTripper {
	if g.ownedBase == nil {
		return g.base
	}
	idle := 2 * probeInterval(rt.cfg)
	if g.probeTr != nil && g.probeTr.IdleConnTimeout == idle {
		return g.probeTr
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 0 // no total cap: at most probeMaxIdlePerHost per backend address
	tr.MaxIdleConnsPerHost = probeMaxIdlePerHost
	tr.IdleConnTimeout = idle
	tr.DisableCompression = true
	d := &net.Dialer{Timeout: duration(rt.cfg.Timeouts.DialSeconds), KeepAlive: 30 * time.Second}
	tr.DialContext = d.DialContext
	g.closeProbeIdle()
	g.probeTr = tr
	return tr
}

// probeInterval is cfg's health interval with the default applied.
func probeInterval(cfg Config) time.Duration {
	s := cfg.Health.IntervalSeconds
	if s <= 0 {
		s = health.DefaultIntervalSeconds
	}
	return time.Duration(s * float64(time.Second))
}

// closeProbeIdle closes the idle connections of the probe transport (none with
// WithTransport). Probes in flight keep theirs.
func (g *Gateway) closeProbeIdle() {
	if g.probeTr != nil {
		g.probeTr.CloseIdleConnections()
	}
}
