package health

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"
)

// Defaults applied by [NewProber] to zero fields of [ProbeConfig].
const (
	DefaultProbePath        = "/health" // what vLLM, SGLang and TGI serve
	DefaultIntervalSeconds  = 5.0
	DefaultTimeoutSeconds   = 2.0
	DefaultFailureThreshold = 3
	DefaultSuccessThreshold = 2
)

// Errors returned (wrapped with the field or target and the offending value) by
// [ProbeConfig.Validate] and [NewProber].
var (
	// ErrInvalidProbeConfig: a ProbeConfig field is out of range (negative, NaN, infinite,
	// below one nanosecond, or a path that is not an absolute URL path: see
	// [ProbeConfig.Path]).
	ErrInvalidProbeConfig = errors.New("health: invalid probe config")
	// ErrInvalidTarget: a Target has an empty ID or an unusable URL (see [Target.URL]).
	ErrInvalidTarget = errors.New("health: invalid probe target")
	// ErrDuplicateTarget: two Targets share an ID.
	ErrDuplicateTarget = errors.New("health: duplicate probe target ID")
)

// ProbeConfig configures a [Prober]. It is plain data (YAML/JSON tags); a zero field
// takes its default. Negative values are errors.
type ProbeConfig struct {
	// Path is requested on every target's base URL; it must start with "/" and be
	// printable ASCII without spaces or '#' (escape them: "/my%20health"), with valid
	// %-escapes; a query is kept ("/health?full=1"). Anything else is
	// [ErrInvalidProbeConfig]: a space or control byte made every probe fail, so every
	// target went Down at once. Default "/health".
	Path string `yaml:"path" json:"path"`
	// IntervalSeconds is the time between the starts of two probes of a target, in
	// seconds. Default 5. [Prober.Run] spreads the targets' probes across it (see there);
	// a probe still in flight when its target is due again makes that next probe be
	// dropped, never queued. With [WithTicks], it is unused (the ticks start the rounds).
	IntervalSeconds float64 `yaml:"interval_seconds" json:"interval_seconds"`
	// TimeoutSeconds bounds each probe request (connect, headers and body), in seconds;
	// a probe that times out is a failure. Default 2.
	TimeoutSeconds float64 `yaml:"timeout_seconds" json:"timeout_seconds"`
	// FailureThreshold is the number of consecutive failed probes that mark a Healthy
	// target Down. Default 3.
	FailureThreshold int `yaml:"failure_threshold" json:"failure_threshold"`
	// SuccessThreshold is the number of consecutive successful probes that mark a Down
	// target Healthy again. Default 2.
	SuccessThreshold int `yaml:"success_threshold" json:"success_threshold"`
}

// Validate reports the first invalid field as an error wrapping [ErrInvalidProbeConfig]
// that names the field (by its YAML key) and its value. Zero fields are valid (defaults).
func (c ProbeConfig) Validate() error {
	_, err := c.resolve()
	return err
}

// resolved is a validated ProbeConfig with defaults applied.
type resolved struct {
	path             string
	interval         time.Duration
	timeout          time.Duration
	failureThreshold int
	successThreshold int
}

func (c ProbeConfig) resolve() (resolved, error) {
	r := resolved{
		path:             c.Path,
		failureThreshold: c.FailureThreshold,
		successThreshold: c.SuccessThreshold,
	}
	if r.path == "" {
		r.path = DefaultProbePath
	} else if why := pathProblem(r.path); why != "" {
		return r, fmt.Errorf("%w: path %q %s", ErrInvalidProbeConfig, c.Path, why)
	}
	var err error
	if r.interval, err = seconds("interval_seconds", c.IntervalSeconds, DefaultIntervalSeconds); err != nil {
		return r, err
	}
	if r.timeout, err = seconds("timeout_seconds", c.TimeoutSeconds, DefaultTimeoutSeconds); err != nil {
		return r, err
	}
	switch {
	case r.failureThreshold < 0:
		return r, fmt.Errorf("%w: failure_threshold %d must be >= 0 (0 means %d)",
			ErrInvalidProbeConfig, c.FailureThreshold, DefaultFailureThreshold)
	case r.failureThreshold == 0:
		r.failureThreshold = DefaultFailureThreshold
	}
	switch {
	case r.successThreshold < 0:
		return r, fmt.Errorf("%w: success_threshold %d must be >= 0 (0 means %d)",
			ErrInvalidProbeConfig, c.SuccessThreshold, DefaultSuccessThreshold)
	case r.successThreshold == 0:
		r.successThreshold = DefaultSuccessThreshold
	}
	return r, nil
}

// pathProblem says why p is not a usable probe path ("" when it is): it must start with
// "/" and be printable ASCII without spaces (0x21..0x7e; a space or control byte would be
// escaped or refused on the wire, so every probe would fail) and without '#' (a fragment
// is never sent), with valid %-escapes. A query ("/health?full=1") is allowed.
func pathProblem(p string) string {
	if !strings.HasPrefix(p, "/") {
		return `must start with "/"`
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c >= 0x7f || c == '#' {
			return fmt.Sprintf("has byte %q at offset %d: want an absolute URL path of printable ASCII, no spaces or '#' (escape them: %%20)", c, i)
		}
	}
	if _, err := url.ParseRequestURI(p); err != nil {
		return "is not a valid URL path: " + err.Error()
	}
	return ""
}

// seconds converts a config value in seconds to a positive Duration.
func seconds(field string, v, def float64) (time.Duration, error) {
	if v == 0 {
		v = def
	}
	if math.IsNaN(v) || v < 0 || v*float64(time.Second) >= math.MaxInt64 {
		return 0, fmt.Errorf("%w: %s %v must be a finite number >= 0", ErrInvalidProbeConfig, field, v)
	}
	d := time.Duration(v * float64(time.Second))
	if d <= 0 {
		return 0, fmt.Errorf("%w: %s %v is below one nanosecond", ErrInvalidProbeConfig, field, v)
	}
	return d, nil
}
