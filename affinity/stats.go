package affinity

// Stats is a snapshot of a Scheduler's (or Table's) counters since construction.
type Stats struct {
	Hits      uint64      // SelectBackend calls that returned affinityHit = true
	Misses    uint64      // SelectBackend calls that returned affinityHit = false (no error)
	Broken    BrokenStats // bindings broken within their TTL, by reason
	Evictions uint64      // bindings evicted at the cap (LRU)
	// Expired counts expired bindings reclaimed: by the SelectBackend that rebinds the
	// key, by the amortized reclaim of inserts, by Sweep, and by OnBackendDown or
	// DeleteBackend. (Table.Bind and Table.Delete remove expired bindings uncounted.)
	Expired  uint64
	Bindings int // stored bindings, expired-but-not-reclaimed included
	// ParentPlaced counts the misses (included in Misses) that
	// Scheduler.SelectBackendWithParent or Scheduler.AcquireWithParent placed on the parent
	// session's backend.
	ParentPlaced uint64
}

// BrokenStats counts broken bindings by reason (see metrics.Reason).
type BrokenStats struct {
	Down         uint64 // removed by OnBackendDown
	Unhealthy    uint64 // found with its backend Down in the health set, still a candidate
	NotCandidate uint64 // found with its backend missing from the candidates
	Overloaded   uint64 // moved by a load-aware Acquire (a spill)
}

// Total returns Down + Unhealthy + NotCandidate + Overloaded.
func (b BrokenStats) Total() uint64 { return b.Down + b.Unhealthy + b.NotCandidate + b.Overloaded }

// HitRate returns Hits / (Hits + Misses), or 0 before any call.
func (s Stats) HitRate() float64 {
	if s.Hits+s.Misses == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Hits+s.Misses)
}
