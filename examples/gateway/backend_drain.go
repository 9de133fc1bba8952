package gateway

// applyDrains applies backends[].drain (the operator's drain, [BackendConfig.Drain]) to
// the health set of rt's Scheduler and returns the IDs it drained and undrained. At start
// (old nil) every backend with drain: true is drained. On a reload, a backend the reload
// adds is drained if its drain is true, and a backend that stays is drained or undrained
// only when its drain changed: a reload that leaves the value alone leaves the drain state
// alone (a drain or undrain an embedder made through [Gateway.Scheduler] stays). A
// removed backend's drain is forgotten by Reload with the rest of its health state.
//
// The health set keeps the drain apart from observed health, so a drained backend that is
// Down stays Down (and is Draining once it passes its checks again), and ending a drain
// of a Down backend leaves it Down. Each change of the effective state is logged as
// "backend state change" (Info: the operator's doing, not a failure). Called with reloadMu held (or from New); the health set's
// writes are safe for concurrent use with requests in flight. Cost: O(backends), and a
// health set write for each backend whose drain changes.
func (g *Gateway) applyDrains(old, rt *routing) (drained, undrained []string) {
	hs := rt.sched.Health()
	for _, b := range rt.backends {
		was := false // at start, and for a backend the reload adds
		if old != nil {
			if ob := old.byID[b.id]; ob != nil {
				was = ob.drain
			}
		}
		if b.drain == was {
			continue
		}
		from := hs.State(b.id)
		why := "config: backends[].drain: true"
		if b.drain {
			rt.sched.OnBackendDraining(b.id)
			drained = append(drained, b.id)
		} else {
			rt.sched.Undrain(b.id)
			undrained = append(undrained, b.id)
			why = "config: backends[].drain: false (was true)"
		}
		if to := hs.State(b.id); to != from {
			g.logStateChange(b.id, from, to, why)
		}
	}
	return drained, undrained
}
