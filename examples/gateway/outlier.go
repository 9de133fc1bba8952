package gateway

import (
	"fmt"
	"sync"
	"time"

	"github.com/agentserve/sessionaffinity/health"
)

// OutlierConfig configures passive outlier detection, modelled on Envoy's outlier
// detection (envoyproxy.io, "Outlier detection": consecutive 5xx, consecutive
// local-origin failures, ejection time = base x number of ejections capped at a
// maximum, max_ejection_percent). Zero or omitted fields take the defaults shown.
//
// A backend is ejected — marked Down through [affinity.Scheduler.OnBackendDown], so new
// placements avoid it and its bindings are broken with reason "down" — when within
// window_seconds it fails consecutive_connect_failures requests in a row at the
// connection level (refused or reset on a fresh connection, dial or response-header
// timeout, a stalled stream, a response body the backend cuts before its end, a response
// that is not valid HTTP: [ErrBadResponse]) or answers consecutive_5xx requests in a row
// with a 5xx status. Decision: a malformed response joins the connection-level streak,
// not the 5xx one: no status was received (the 502 is the gateway's own), and like a cut
// body it breaks the exchange itself, so the stricter threshold applies. A response-header timeout or a
// stalled stream is evidence of a wedged backend only when the backend showed no progress
// while the attempt waited — no response-body bytes of any generation call to it since
// the attempt was sent (a header timeout) or since the stalled read began (a stall);
// response headers, other endpoints' answers (/v1/models) and successful active health
// probes are not progress (a wedged engine's HTTP front end may still give all of
// those). When it generated for others meanwhile,
// the timeout is this request being slow (a long generation, a huge prompt): the client
// still gets its 504 or cut stream and the lease is released with the error, but
// nothing is counted (logged at Info: "not counted"). Progress is recorded at most once
// per 64 ms per backend, so progress only within 64 ms of the last recorded one may be
// missed, and the timeout then counts. Any response below 500 resets both
// streaks once its body has been read to its end (a bodiless response — to a HEAD, a 204
// or 304, Content-Length 0 — once it is closed). A body the client drops before its end
// (code_class client_closed) counts neither way: a client cancelling streams must not
// hide a backend that cuts the others. Nor does a request whose client gives up before
// the response headers arrive: so a hung backend (it accepts requests, never answers,
// and its health path says 200) is never ejected while every client's own timeout is
// shorter than timeouts.response_header_seconds (default 300); set that below the
// clients' timeouts for non-streaming traffic, or rely on the active check where the
// hang shows on the health path. Connection problems on a reused keep-alive connection
// before any response byte are not counted (see [IsConnectError] and the retry rules in
// the package doc).
type OutlierConfig struct {
	// Enabled turns ejection on; nil (omitted) means true. With false no backend is ever
	// ejected and failures only fail the request.
	Enabled *bool `yaml:"enabled"`
	// ConsecutiveConnectFailures ejects after this many connection-level failures in a
	// row (default 3).
	ConsecutiveConnectFailures int `yaml:"consecutive_connect_failures"`
	// Consecutive5xx ejects after this many 5xx responses in a row (default 5).
	Consecutive5xx int `yaml:"consecutive_5xx"`
	// WindowSeconds is how long a streak may take: a failure more than window_seconds
	// after the first failure of the current streak starts a new streak (default 30).
	WindowSeconds float64 `yaml:"window_seconds"`
	// BaseEjectionSeconds is the first ejection's length; the n-th ejection lasts
	// n x base (default 30). n restarts at 1 for an ejection that comes
	// max_ejection_seconds or more after the end of the backend's previous one (well
	// behaved that long: the back-off starts over); it is checked when the ejection
	// happens, nothing runs in between.
	BaseEjectionSeconds float64 `yaml:"base_ejection_seconds"`
	// MaxEjectionSeconds caps one ejection's length (default 300), and is how long a
	// backend must stay un-ejected for its back-off to start over (see
	// BaseEjectionSeconds).
	MaxEjectionSeconds float64 `yaml:"max_ejection_seconds"`
	// MaxEjectionPercent caps the share of configured backends ejected at once, 1..100
	// (default 50); at least one may always be ejected when there are two or more
	// backends, and a sole backend is never ejected.
	MaxEjectionPercent int `yaml:"max_ejection_percent"`
}

// Defaults of [OutlierConfig].
const (
	DefaultConsecutiveConnectFailures = 3
	DefaultConsecutive5xx             = 5
	DefaultOutlierWindowSeconds       = 30.0
	DefaultBaseEjectionSeconds        = 30.0
	DefaultMaxEjectionSeconds         = 300.0
	DefaultMaxEjectionPercent         = 50
)

func (o OutlierConfig) withDefaults() OutlierConfig {
	if o.Enabled == nil {
		o.Enabled = new(true)
	}
	if o.ConsecutiveConnectFailures == 0 {
		o.ConsecutiveConnectFailures = DefaultConsecutiveConnectFailures
	}
	if o.Consecutive5xx == 0 {
		o.Consecutive5xx = DefaultConsecutive5xx
	}
	o.WindowSeconds = orDefault(o.WindowSeconds, DefaultOutlierWindowSeconds)
	o.BaseEjectionSeconds = orDefault(o.BaseEjectionSeconds, DefaultBaseEjectionSeconds)
	o.MaxEjectionSeconds = orDefault(o.MaxEjectionSeconds, DefaultMaxEjectionSeconds)
	if o.MaxEjectionPercent == 0 {
		o.MaxEjectionPercent = DefaultMaxEjectionPercent
	}
	return o
}

func (o OutlierConfig) validate() error {
	if o.ConsecutiveConnectFailures < 0 || o.Consecutive5xx < 0 {
		return invalid(ErrOutlierConfig, "outlier_detection: consecutive_connect_failures %d, consecutive_5xx %d: must be >= 1",
			o.ConsecutiveConnectFailures, o.Consecutive5xx)
	}
	for _, f := range []struct {
		name   string
		v, def float64
	}{
		{"window_seconds", o.WindowSeconds, DefaultOutlierWindowSeconds},
		{"base_ejection_seconds", o.BaseEjectionSeconds, DefaultBaseEjectionSeconds},
		{"max_ejection_seconds", o.MaxEjectionSeconds, DefaultMaxEjectionSeconds},
	} {
		if p := defaultSecondsProblem(f.v, f.def); p != "" {
			return invalid(ErrOutlierConfig, "outlier_detection.%s: %v: %s", f.name, f.v, p)
		}
	}
	if o.MaxEjectionSeconds < o.BaseEjectionSeconds {
		return invalid(ErrOutlierConfig, "outlier_detection.max_ejection_seconds: %v: must be >= base_ejection_seconds (%v)",
			o.MaxEjectionSeconds, o.BaseEjectionSeconds)
	}
	if o.MaxEjectionPercent < 1 || o.MaxEjectionPercent > 100 {
		return invalid(ErrOutlierConfig, "outlier_detection.max_ejection_percent: %d: must be 1..100", o.MaxEjectionPercent)
	}
	return nil
}

// failureKind is what a request's outcome counts as for outlier detection.
type failureKind int

const (
	connectFailure failureKind = iota // refused/reset on a fresh connection, timeouts and stalls without progress (progress.go), cut body, malformed response
	status5xx                         // a response with status >= 500
)

// outlierState is one backend's outlier-detection record; guarded by outliers.mu.
type outlierState struct {
	connFails, fails5xx int
	streakStart         time.Time // first failure of the current streak
	ejected             bool
	until               time.Time // end of the current ejection
	ejections           int       // multiplier of the ejection time
	lastUneject         time.Time
	reason              string // why it was ejected
	total               uint64 // ejections since start (metrics)
}

// outliers tracks consecutive failures per backend and ejects them. It reads the current
// routing snapshot for the configuration (outlier_detection is reloadable) and the set
// of backends; a backend removed by a reload is forgotten. Safe for concurrent use;
// every method is O(1) but ejected and expired, O(backends).
type outliers struct {
	g   *Gateway
	now func() time.Time

	mu    sync.Mutex
	state map[string]*outlierState // configured backends that have had an outcome
	count int                      // backends currently ejected
}

func newOutliers(g *Gateway, now func() time.Time) *outliers {
	return &outliers{g: g, now: now, state: make(map[string]*outlierState)}
}

// get returns id's record, creating it for a configured backend (nil for others). Call
// with o.mu held.
func (o *outliers) get(rt *routing, id string) *outlierState {
	s := o.state[id]
	if s == nil && rt.byID[id] != nil {
		s = &outlierState{}
		o.state[id] = s
	}
	return s
}

// maxEjected is how many of rt's backends may be ejected at once.
func maxEjected(rt *routing) int {
	n := len(rt.backends)
	if n < 2 {
		return 0
	}
	return max(1, n*rt.cfg.OutlierDetection.MaxEjectionPercent/100)
}

// success records a response below 500 whose body ended without a backend failure: both
// streaks end.
func (o *outliers) success(id string) {
	o.mu.Lock()
	if s := o.state[id]; s != nil {
		s.connFails, s.fails5xx = 0, 0
	}
	o.mu.Unlock()
}

// forget drops the record of a backend a reload removed (ending its ejection).
func (o *outliers) forget(id string) {
	o.mu.Lock()
	if s := o.state[id]; s != nil && s.ejected {
		o.count--
	}
	delete(o.state, id)
	o.mu.Unlock()
}

// failure records one failure of kind on id and ejects it when a streak reaches its
// threshold. It reports whether this call ejected id.
func (o *outliers) failure(id string, kind failureKind, cause error) bool {
	rt := o.g.state()
	cfg := rt.cfg.OutlierDetection
	if !*cfg.Enabled {
		return false
	}
	now := o.now()
	o.mu.Lock()
	s := o.get(rt, id)
	if s == nil || s.ejected {
		o.mu.Unlock()
		return false
	}
	if (s.connFails == 0 && s.fails5xx == 0) || now.Sub(s.streakStart) > duration(cfg.WindowSeconds) {
		s.connFails, s.fails5xx, s.streakStart = 0, 0, now
	}
	var why string
	switch kind {
	case connectFailure:
		s.connFails++
		if s.connFails >= cfg.ConsecutiveConnectFailures {
			why = fmt.Sprintf("%d consecutive connection failures (last: %v)", s.connFails, cause)
		}
	case status5xx:
		s.fails5xx++
		if s.fails5xx >= cfg.Consecutive5xx {
			why = fmt.Sprintf("%d consecutive 5xx responses (last: %v)", s.fails5xx, cause)
		}
	}
	if why == "" {
		o.mu.Unlock()
		return false
	}
	if o.count >= maxEjected(rt) {
		s.connFails, s.fails5xx = 0, 0 // a new streak is needed for the next attempt (and log line)
		o.mu.Unlock()
		o.g.log.Warn("backend not ejected: max_ejection_percent reached", "backend", id, "why", why,
			"max_ejected", maxEjected(rt))
		return false
	}
	if !s.lastUneject.IsZero() && now.Sub(s.lastUneject) >= duration(cfg.MaxEjectionSeconds) {
		s.ejections = 0 // well-behaved long enough: start the back-off over
	}
	s.ejections++
	d := min(duration(cfg.BaseEjectionSeconds)*time.Duration(s.ejections), duration(cfg.MaxEjectionSeconds))
	s.ejected, s.until, s.reason = true, now.Add(d), why
	s.connFails, s.fails5xx = 0, 0
	from := rt.sched.Health().State(id)
	o.count++
	s.total++
	ejections := s.ejections
	o.mu.Unlock()

	n := rt.sched.OnBackendDown(id)
	o.g.log.Warn("backend state change", "backend", id, "from", from.String(), "to", "down (ejected)",
		"why", "outlier detection: "+why, "ejection", d, "ejections", ejections, "bindings_broken", n)
	return true
}

// isEjected reports whether id is currently ejected.
func (o *outliers) isEjected(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.state[id]
	return s != nil && s.ejected
}

// ejected returns the ejected backends in configuration order.
func (o *outliers) ejected() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var ids []string
	for _, b := range o.g.state().backends {
		if s := o.state[b.id]; s != nil && s.ejected {
			ids = append(ids, b.id)
		}
	}
	return ids
}

// expired returns the ejected backends whose ejection time is over.
func (o *outliers) expired() []string {
	now := o.now()
	o.mu.Lock()
	defer o.mu.Unlock()
	var ids []string
	for _, b := range o.g.state().backends {
		if s := o.state[b.id]; s != nil && s.ejected && !now.Before(s.until) {
			ids = append(ids, b.id)
		}
	}
	return ids
}

// uneject ends id's ejection by recording it as observed up
// ([affinity.Scheduler.OnBackendUp]): it is Healthy again, or Draining when an operator
// drained it (an ejection is observed health and never touches a drain) — unless the
// active prober holds it Down: then only the ejection ends (logged as a "backend state
// change" from "down (ejected)" to down, with the check's last failure) and the prober's
// recovery brings it back.
func (o *outliers) uneject(id, why string) bool {
	o.mu.Lock()
	s := o.state[id]
	if s == nil || !s.ejected {
		o.mu.Unlock()
		return false
	}
	s.ejected, s.lastUneject = false, o.now()
	s.connFails, s.fails5xx = 0, 0
	o.count--
	o.mu.Unlock()
	rt := o.g.state()
	if rt.prober != nil && rt.prober.State(id) == health.Down {
		// Ejected -> down is a state change (/readyz and agentserve_backend_state show it):
		// one "backend state change" line like every other, at Warn as it stays down.
		held := "the active health check still holds it down"
		if cause := o.g.probeCauses.get(id); cause != "" {
			held += " (its last failure: " + cause + ")"
		}
		o.g.log.Warn("backend state change", "backend", id, "from", "down (ejected)", "to", health.Down.String(),
			"why", "outlier detection: "+why+"; "+held+" until it passes success_threshold probes")
		return false
	}
	rt.sched.OnBackendUp(id)
	o.g.log.Info("backend state change", "backend", id, "from", "down (ejected)",
		"to", rt.sched.Health().State(id).String(), "why", why)
	return true
}
