package metrics

// ParentRecorder is an optional extension of [Recorder]: a Recorder that also implements
// it is told when the Scheduler placed a session's first turn on its parent session's
// backend (a placement hint, see affinity.Scheduler.SelectBackendWithParent and
// AcquireWithParent). Such a turn
// is also counted as a Miss, so hit rate keeps its meaning; ParentPlaced is the distinct
// outcome within the misses. Recorders that do not implement it simply do not see it.
//
// The same rules as for Recorder apply: safe for concurrent use, no blocking, do not
// retain tier.
type ParentRecorder interface {
	// ParentPlaced counts one first turn placed on the parent session's backend.
	ParentPlaced(tier string)
}

var _ ParentRecorder = (*Recording)(nil)

// ParentPlaced logs a KindParentPlaced event.
func (r *Recording) ParentPlaced(tier string) { r.record(Event{Kind: KindParentPlaced, Tier: tier}) }
