package metrics

// Store operations, the values of the op label of agentserve_affinity_store_errors_total.
// The set is closed: a Recorder may rely on these five values only.
const (
	StoreOpClaim   = "claim"   // a first turn's atomic claim (or adoption) of a binding
	StoreOpRebind  = "rebind"  // a compare-and-set rebind of a broken binding
	StoreOpRefresh = "refresh" // a hit's periodic TTL refresh
	StoreOpForget  = "forget"  // a forgotten session
	StoreOpWatch   = "watch"   // the invalidation subscription
)

// StoreRecorder is implemented by a [Recorder] that also counts failed calls to a shared
// binding store (affinity.Store): on the request path each one made the Scheduler fall
// back to its local table; a store's own background calls (refreshes, the subscription)
// count theirs too. A store may also count a call that succeeded but repaired a key
// holding no binding (redisstore: a wrong Redis type or an over-long value), under that
// call's op: the call was answered from the store, nothing fell back. The Scheduler
// checks for it with a type assertion; a Recorder without it simply does not see these
// events. Same rules as Recorder: safe for concurrent use, never
// blocking. op is one of the StoreOp constants.
type StoreRecorder interface {
	StoreError(op string)
}
