package affinity

import (
	"log/slog"

	"github.com/agentserve/sessionaffinity/health"
	"github.com/agentserve/sessionaffinity/metrics"
)

// Option configures the code seams of [New] and [NewTable]: clock, recorder, health set,
// logger. Plain settings belong in [Config].
type Option interface {
	apply(*options)
}

type options struct {
	clock  Clock
	rec    metrics.Recorder
	health *health.Set
	log    *slog.Logger
	store  storeOptions // WithStore, WithStoreTimeouts (store.go)
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithClock sets the clock (default: the system clock; see also [CoarseClock] and
// package affinitytest). nil, a nil ClockFunc and a nil *CoarseClock keep the default.
func WithClock(c Clock) Option { return optionFunc(func(o *options) { o.clock = c }) }

// WithRecorder sets the metrics recorder (default metrics.Noop{}). It is called outside
// the Scheduler's locks, once per event, with the tier as the only label. nil keeps the
// default. A Table uses only its Evicted method.
func WithRecorder(r metrics.Recorder) Option {
	return optionFunc(func(o *options) { o.rec = r })
}

// WithHealth shares a health set with the caller's checker (default: a new empty set, all
// backends Healthy). The Scheduler reads it on every call and marks it in OnBackendDown,
// OnBackendUp and OnBackendDraining. Ignored by NewTable. nil keeps the default.
//
// Marking a backend Down directly in the set (not through OnBackendDown) stops new
// bindings to it at once, and its existing bindings are counted broken{unhealthy} lazily,
// when their session returns; wire the checker to [Scheduler.OnHealthChange] to drop them
// eagerly.
func WithHealth(s *health.Set) Option { return optionFunc(func(o *options) { o.health = s }) }

// WithLogger sets the logger for rare events (default: none). The Scheduler logs at
// Debug each broken binding that SelectBackend rebinds (tier, reason, old and new backend
// ID; never the session ID) and at Info each OnBackendDown that removed bindings (backend
// ID and count). It never logs per hit or per miss. nil keeps the default.
func WithLogger(l *slog.Logger) Option { return optionFunc(func(o *options) { o.log = l }) }
