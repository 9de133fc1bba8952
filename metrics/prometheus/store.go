package prometheus

import "github.com/agentserve/sessionaffinity/metrics"

// storeOps are the values of the op label, created at 0 by New.
var storeOps = [...]string{metrics.StoreOpClaim, metrics.StoreOpRebind, metrics.StoreOpRefresh, metrics.StoreOpForget, metrics.StoreOpWatch}

// StoreError implements metrics.StoreRecorder: it counts one failed call to a shared
// binding store, or one key a successful call repaired, in
// agentserve_affinity_store_errors_total{op}. An op outside the metrics.StoreOp* values
// is counted as "other" (the label stays bounded). Safe for concurrent use; one label
// lookup and an atomic add.
func (r *Recorder) StoreError(op string) {
	switch op {
	case metrics.StoreOpClaim, metrics.StoreOpRebind, metrics.StoreOpRefresh, metrics.StoreOpForget, metrics.StoreOpWatch:
	default:
		op = TierOther
	}
	r.storeErrors.WithLabelValues(op).Inc()
}
