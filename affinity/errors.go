package affinity

import "errors"

// Sentinel errors. Every error returned by this package wraps exactly one of them (with
// the offending value) — except [CoarseClock.Run], which returns ctx.Err() when its
// context ends; branch with [errors.Is]. A call that returns an error has stored nothing
// and counted nothing.
var (
	// ErrEmptySessionID: SelectBackend (or a Table method) got "" as the session ID.
	ErrEmptySessionID = errors.New("affinity: empty session ID")
	// ErrSessionIDTooLong: the session ID is longer than Config.MaxSessionIDBytes.
	ErrSessionIDTooLong = errors.New("affinity: session ID too long")
	// ErrTierTooLong: the tier is longer than MaxTierBytes (255) bytes.
	ErrTierTooLong = errors.New("affinity: tier too long")
	// ErrNoCandidates: SelectBackend got an empty candidate slice.
	ErrNoCandidates = errors.New("affinity: no candidates")
	// ErrInvalidBackend: an empty backend ID (given to NewBackend or Table.Bind, or a zero
	// Backend among SelectBackend's candidates), an ID over MaxBackendIDBytes given to
	// NewBackend or Table.Bind, or an invalid weight given to NewBackend
	// (negative, NaN, Inf or outside [hrw.MinWeight, hrw.MaxWeight]; also wraps
	// hrw.ErrInvalidWeight).
	ErrInvalidBackend = errors.New("affinity: invalid backend")
	// ErrNoEligibleBackend: every candidate is Down in the health set.
	ErrNoEligibleBackend = errors.New("affinity: no eligible backend")
	// ErrInvalidConfig: Config.Validate (and so New) rejected a field; the message names
	// the field (by its yaml/json key) and the value.
	ErrInvalidConfig = errors.New("affinity: invalid config")
	// ErrInvalidCost: Acquire got a negative cost.
	ErrInvalidCost = errors.New("affinity: invalid cost")
	// ErrInvalidLease: Acquire got a nil *Lease or one still open (its Done not called).
	ErrInvalidLease = errors.New("affinity: invalid lease")
	// ErrInvalidLoad: ReportLoad got an empty backend ID, a negative request count or a
	// KV-cache usage outside [0, 1].
	ErrInvalidLoad = errors.New("affinity: invalid load report")
	// ErrClockRunning: CoarseClock.Run was called while another Run of the same clock
	// was still running (a programmer error; the second call returns at once).
	ErrClockRunning = errors.New("affinity: CoarseClock.Run already running")
)

// errTrunc returns at most 32 bytes of s, quoted, so that a huge session ID never ends up
// whole in an error message or a log line.
func errTrunc(s string) string {
	const max = 32
	if len(s) <= max {
		return quote(s)
	}
	return quote(s[:max]) + "..."
}
