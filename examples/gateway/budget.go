package gateway

// Exported access to the in-flight limits, for integrations that hold request bodies or
// serve requests themselves (such as an Envoy ext_proc endpoint picker), so that they
// are bounded by the same limits.max_inflight_bytes and limits.max_inflight_requests as
// the gateway's own requests and show in the same gauges (agentserve_gateway_inflight_*).

// ReserveBytes charges n bytes to limits.max_inflight_bytes (the current configuration's
// cap) and reports whether they fit; on false nothing is charged. n <= 0 always fits.
// Return them with [Gateway.ReleaseBytes]. Safe for concurrent use; O(1), no allocation.
func (g *Gateway) ReserveBytes(n int64) bool {
	if n <= 0 {
		return true
	}
	return take(&g.limits.bytes, n, g.state().cfg.Limits.MaxInflightBytes)
}

// ReleaseBytes returns n bytes taken with [Gateway.ReserveBytes]; n <= 0 does nothing.
// Return exactly what was reserved: an extra release loosens limits.max_inflight_bytes
// until reservations make up for it. Safe for concurrent use; O(1), no allocation.
func (g *Gateway) ReleaseBytes(n int64) {
	if n > 0 {
		g.limits.bytes.Add(-n)
	}
}

// AcquireRequest takes one of limits.max_inflight_requests (the current configuration's
// cap) and reports whether one was free; on false nothing is taken. Return it with
// [Gateway.ReleaseRequest]. Safe for concurrent use; O(1), no allocation.
func (g *Gateway) AcquireRequest() bool {
	return take(&g.limits.reqs, 1, g.state().cfg.Limits.MaxInflightRequests)
}

// ReleaseRequest returns a request slot taken with [Gateway.AcquireRequest], once per
// slot: a release without its AcquireRequest lowers the count below the real number
// and loosens limits.max_inflight_requests. Safe for concurrent use; O(1), no allocation.
func (g *Gateway) ReleaseRequest() { g.limits.reqs.Add(-1) }
