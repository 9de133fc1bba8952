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
)

// NumReasons is the number of valid Reasons; valid values are 1..NumReasons.
const NumReasons = 3

// String returns the Prometheus label value: "down", "unhealthy" or "not_candidate".
// An invalid Reason renders as "Reason(n)". It does not allocate for valid values.
func (r Reason) String() string {
	switch r {
	case ReasonDown:
		return "down"
	case ReasonUnhealthy:
		return "unhealthy"
	case ReasonNotCandidate:
		return "not_candidate"
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}

// Valid reports whether r is one of ReasonDown, ReasonUnhealthy, ReasonNotCandidate.
func (r Reason) Valid() bool { return r >= ReasonDown && r <= ReasonNotCandidate }

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
