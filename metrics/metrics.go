package metrics

import "strconv"

// Reason says why a binding that was still within its TTL could not be honoured and was
// counted as broken. Its String form is the Prometheus label value of the reason label.
// The zero value is not a valid Reason.
type Reason uint8

const (
	// ReasonDown: the binding was removed by the Scheduler's OnBackendDown (or
	// OnHealthChange with To Down), which counts every still-valid binding to that
	// backend at once.
	ReasonDown Reason = iota + 1
	// ReasonUnhealthy: found at selection time with its backend still among the
	// candidates but Down in the health set, i.e. marked Down there directly rather than
	// through OnBackendDown (or OnBackendDown had not reached that binding yet). The
	// Scheduler documents the exact rules.
	ReasonUnhealthy
	// ReasonNotCandidate: the bound backend is no longer among the request's candidates.
	ReasonNotCandidate
	// ReasonOverloaded: the binding was honourable but its backend was overloaded, and the
	// Scheduler's load-aware Acquire moved the session (a spill, a rebind) because waiting
	// there would cost more than re-prefilling the session's prefix elsewhere.
	ReasonOverloaded
)

// NumReasons is the number of valid Reasons; valid values are 1..NumReasons.
const NumReasons = 4

// String returns the Prometheus label value: "down", "unhealthy", "not_candidate" or
// "overloaded".
// An invalid Reason renders as "Reason(n)". It does not allocate for valid values.
func (r Reason) String() string {
	switch r {
	case ReasonDown:
		return "down"
	case ReasonUnhealthy:
		return "unhealthy"
	case ReasonNotCandidate:
		return "not_candidate"
	case ReasonOverloaded:
		return "overloaded"
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}

// Valid reports whether r is one of ReasonDown, ReasonUnhealthy, ReasonNotCandidate,
// ReasonOverloaded.
func (r Reason) Valid() bool { return r >= ReasonDown && r <= ReasonOverloaded }

// Recorder receives the Scheduler's events. The Scheduler calls it outside its own locks,
// once per event, on the goroutine of the call that caused the event: SelectBackend (hits,
// misses, evictions, broken bindings found at selection time), OnBackendDown (one Broken
// per still-valid binding it removes) or, for a Table used alone, Bind (evictions).
//
// Implementations must be safe for concurrent use, must not block (no I/O on the call
// path), and must not retain the tier string beyond the call unless they copy it. Tier ""
// is the default tier (adapters may label it "default").
type Recorder interface {
	// Hit counts a request served by the session's still-valid binding.
	Hit(tier string)
	// Miss counts a request placed by rendezvous hashing (new session, expired or broken
	// binding, or affinity disabled).
	Miss(tier string)
	// Broken counts one binding that was within its TTL but could not be honoured.
	Broken(tier string, reason Reason)
	// Evicted counts one binding removed at the capacity limit (least recently used).
	Evicted(tier string)
}

// Compile-time checks that the package's types implement Recorder.
var (
	_ Recorder = Noop{}
	_ Recorder = (*Counters)(nil)
	_ Recorder = (*Recording)(nil)
)

// Noop is a Recorder that discards every event. Its zero value is ready; all methods are
// safe for concurrent use, cost nothing and never allocate.
type Noop struct{}

// Hit does nothing.
func (Noop) Hit(string) {}

// Miss does nothing.
func (Noop) Miss(string) {}

// Broken does nothing.
func (Noop) Broken(string, Reason) {}

// Evicted does nothing.
func (Noop) Evicted(string) {}

// UsageRecorder is an optional extension of [Recorder] for the token usage a backend
// reports when a load-aware lease ends (affinity.Lease.Done with usage): a Recorder that
// also implements it is found with a type assertion, so existing Recorders keep
// compiling. Usage is called once per lease that was an affinity hit and whose Done
// reported prompt tokens and a cached count (affinity.DoneInfo: CachedPromptTokens > 0,
// or CacheReported), outside the Scheduler's locks, on the goroutine that called Done;
// the same rules as Recorder apply (concurrency-safe, non-blocking, do not retain tier).
// A hit whose backend did not report its cached tokens (vLLM without
// --enable-prompt-tokens-details) is not passed: its reuse is unknown, not 0 %, so the
// ratio below covers the hits that reported it.
//
// The achieved reuse of a tier is cachedPromptTokens / promptTokens summed over its hits:
// how much of the prefix that affinity was meant to keep warm the backend really served
// from its cache.
type UsageRecorder interface {
	// Usage counts the prompt tokens of one affinity hit and how many of them the backend
	// served from its prefix cache (usage.prompt_tokens_details.cached_tokens);
	// 0 <= cachedPromptTokens <= promptTokens.
	Usage(tier string, promptTokens, cachedPromptTokens int64)
}

// Compile-time checks that the package's types implement UsageRecorder.
var (
	_ UsageRecorder = Noop{}
	_ UsageRecorder = (*Counters)(nil)
	_ UsageRecorder = (*Recording)(nil)
)

// Usage does nothing.
func (Noop) Usage(string, int64, int64) {}
