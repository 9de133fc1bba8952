package gateway

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/health"
)

// configError is a configuration error. Its message says "gateway: invalid config:"
// once, then the field and the value; errors.Is matches [ErrInvalidConfig], the specific
// sentinel (kind) and, when the problem was found by a library, the library's error.
type configError struct {
	kind  error
	msg   string
	cause error // nil, or the library error behind msg
}

// Error returns "gateway: invalid config: " and the message.
func (e *configError) Error() string { return ErrInvalidConfig.Error() + ": " + e.msg }

// Unwrap returns ErrInvalidConfig, the specific sentinel and the library error, if any.
func (e *configError) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrInvalidConfig, e.kind}
	}
	return []error{ErrInvalidConfig, e.kind, e.cause}
}

func invalid(kind error, format string, args ...any) error {
	return &configError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// invalidFrom reports a library's error about field (e.g. "affinity"), dropping the
// library's own "<pkg>: invalid ...:" prefixes so the message does not stutter.
func invalidFrom(kind error, field string, cause error, prefixes ...error) error {
	msg := cause.Error()
	for _, p := range prefixes {
		msg = strings.TrimPrefix(msg, p.Error()+": ")
	}
	return &configError{kind: kind, msg: field + ": " + msg, cause: cause}
}

// Range of every *_seconds key of the gateway's configuration (timeouts, health,
// outlier_detection, limits.retry_after_seconds, sweep, drain, load report).
const (
	// MaxConfigSeconds is the largest value a *_seconds key accepts: 1e6 s (about 11.6
	// days). Larger values were accepted before and overflowed time.Duration (1e10 s
	// became a negative timeout that failed every request); no gateway timer needs more.
	MaxConfigSeconds = 1e6
	// MinConfigSeconds is the smallest non-zero value a *_seconds key accepts: 1 ms.
	// Smaller ones rounded to a zero or sub-microsecond time.Duration that cut every
	// request or stream, or spun a ticker.
	MinConfigSeconds = 1e-3
)

// secondsProblem says why v is not a usable value of a *_seconds key ("" when it is):
// not a finite number, negative, above MaxConfigSeconds, or below MinConfigSeconds
// (0 is allowed when zeroOK: the key's "off").
func secondsProblem(v float64, zeroOK bool) string {
	low := fmt.Sprintf("%g", MinConfigSeconds)
	if zeroOK {
		low = "0 or " + low
	}
	return secondsCheck(v, zeroOK, fmt.Sprintf("must be a number of seconds, %s..%g", low, MaxConfigSeconds))
}

// defaultSecondsProblem is secondsProblem for a key whose 0 (or absence) means its
// default, def: the message says so, since a 0 there is accepted (tester46: "the range
// says 0.001.. while 0 is accepted").
func defaultSecondsProblem(v, def float64) string {
	return secondsCheck(v, true, fmt.Sprintf("must be a number of seconds, %g..%g (0 or omitted: the default, %g)",
		MinConfigSeconds, MaxConfigSeconds, def))
}

func secondsCheck(v float64, zeroOK bool, want string) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > MaxConfigSeconds:
		return want
	case v == 0 && zeroOK:
		return ""
	case v < MinConfigSeconds:
		return want
	}
	return ""
}

// Validate checks the configuration as given (call [Config.WithDefaults] first for
// omitted fields). It returns the first problem found, wrapping [ErrInvalidConfig]
// and a specific sentinel, with the field path and value in the message. It does no
// I/O: binding_snapshot's directory is checked by [New] and [Gateway.Reload].
func (c Config) Validate() error {
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return invalid(ErrListenAddress, "listen: %q: %v", c.Listen, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return invalid(ErrListenAddress, "listen: %q: port must be 0..65535", c.Listen)
	}
	_ = host // empty host means all interfaces
	if err := c.validateAdmin(); err != nil {
		return err
	}
	// Before the library's check, which refuses it too: ErrTierName and this message, as before.
	if _, ok := c.Affinity.Tiers[""]; ok {
		return invalid(ErrTierName, `affinity.tiers[""]: empty tier name: the default pool's TTL is affinity.sticky_ttl_seconds`)
	}
	for name := range c.Affinity.Tiers {
		if strings.TrimSpace(name) == "" { // the library refuses it too; ErrTierName here, as for ""
			return invalid(ErrTierName, "affinity.tiers[%q]: blank tier name: no tier header (trimmed) can name it", name)
		}
	}
	if err := c.Affinity.Validate(); err != nil {
		return invalidFrom(ErrAffinityConfig, "affinity", err, affinity.ErrInvalidConfig)
	}
	if n := c.Affinity.MaxSessionIDBytes; n > SessionIDBytesCap {
		return invalid(ErrAffinityConfig, "affinity.max_session_id_bytes: %d: above %d, the longest session ID a binding snapshot holds "+
			"(%d bytes less the %d-byte tenant tag): the bindings of longer IDs would be lost at a restart (binding_snapshot) and at an affinity reload",
			n, SessionIDBytesCap, affinity.MaxSnapshotSessionIDBytes, TenantTagBytes)
	}
	if len(c.Backends) == 0 {
		return invalid(ErrNoBackends, "backends: at least one backend is required")
	}
	seen := make(map[string]int, len(c.Backends))
	for i, b := range c.Backends {
		if strings.TrimSpace(b.ID) == "" {
			return invalid(ErrBackendID, "backends[%d].id: %q: is empty; every backend needs a non-blank id", i, b.ID)
		}
		if why := backendIDProblem(b.ID); why != "" {
			return invalid(ErrBackendID, "backends[%d].id: %q: %s", i, truncate(b.ID, 64), why)
		}
		if j, dup := seen[b.ID]; dup {
			return invalid(ErrDuplicateBackend, "backends[%d].id: %q already used by backends[%d]", i, b.ID, j)
		}
		seen[b.ID] = i
		if err := checkBackendURL(b.URL); err != nil {
			return invalid(ErrBackendURL, "backends[%d].url (id %q): %q: %v", i, b.ID, health.RedactURL(b.URL), err)
		}
		if b.Weight < 0 || math.IsNaN(b.Weight) || math.IsInf(b.Weight, 0) {
			return invalid(ErrBackendWeight, "backends[%d].weight (id %q): %v: must be a finite number >= 0", i, b.ID, b.Weight)
		}
		if _, err := affinity.NewBackend(b.ID, b.URL, b.Weight); err != nil {
			return invalid(ErrBackendWeight, "backends[%d] (id %q): %v", i, b.ID, err)
		}
		if len(b.Tier) > affinity.MaxTierBytes {
			return invalid(ErrTierName, "backends[%d].tier (id %q): %d bytes (max %d)", i, b.ID, len(b.Tier), affinity.MaxTierBytes)
		}
		if b.Tier != "" && strings.TrimSpace(b.Tier) == "" { // as for affinity.tiers names
			return invalid(ErrTierName, "backends[%d].tier (id %q): blank tier name %q: no tier header (trimmed) can name it; omit it for the default pool", i, b.ID, b.Tier)
		}
	}
	if err := c.validateHeaders(); err != nil {
		return err
	}
	for _, model := range slices.Sorted(maps.Keys(c.ModelTiers)) { // sorted: the same file, the same first error
		switch tier := c.ModelTiers[model]; {
		case model == "":
			return invalid(ErrTierName, `model_tiers[""]: empty model name: it would map every request without a "model" `+
				"(GET /v1/models, ...) to tier %q; name a model, or send the tier header", truncate(tier, 64))
		case strings.TrimSpace(model) == "":
			return invalid(ErrTierName, "model_tiers[%q]: blank model name: no model is named so (a quoting slip or an unfilled template?); name a model, or send the tier header", model)
		case tier == "":
			return invalid(ErrTierName, "model_tiers[%q]: empty tier", model)
		case strings.TrimSpace(tier) == "":
			return invalid(ErrTierName, "model_tiers[%q]: blank tier %q: no tier header (trimmed) can name it", model, tier)
		case len(tier) > affinity.MaxTierBytes:
			return invalid(ErrTierName, "model_tiers[%q]: tier is %d bytes (max %d)", model, len(tier), affinity.MaxTierBytes)
		}
	}
	if c.MaxBodyBytes <= 0 {
		return invalid(ErrMaxBodyBytes, "max_body_bytes: %d: must be > 0", c.MaxBodyBytes)
	}
	if c.Health.Path == "" { // WithDefaults fills it; health.ProbeConfig would too
		return invalid(ErrHealthConfig, "health.path: %q: must start with /", c.Health.Path)
	}
	if err := (health.ProbeConfig{Path: c.Health.Path}).Validate(); err != nil {
		// The prober's own rule: an absolute URL path of printable ASCII, no spaces.
		why := strings.TrimPrefix(err.Error(), health.ErrInvalidProbeConfig.Error()+": path ")
		return &configError{kind: ErrHealthConfig, msg: "health.path: " + why, cause: err}
	}
	for _, f := range []struct {
		name   string
		v, def float64
	}{
		{"health.interval_seconds", c.Health.IntervalSeconds, health.DefaultIntervalSeconds},
		{"health.timeout_seconds", c.Health.TimeoutSeconds, health.DefaultTimeoutSeconds},
	} {
		if p := defaultSecondsProblem(f.v, f.def); p != "" {
			return invalid(ErrHealthConfig, "%s: %v: %s", f.name, f.v, p)
		}
	}
	if c.Health.FailureThreshold < 0 || c.Health.SuccessThreshold < 0 {
		return invalid(ErrHealthConfig, "health thresholds: failure %d, success %d: must be >= 0",
			c.Health.FailureThreshold, c.Health.SuccessThreshold)
	}
	if v := c.Health.PassiveRecheckSeconds; defaultSecondsProblem(v, DefaultPassiveRecheckSeconds) != "" {
		return invalid(ErrPassiveRecheck, "health.passive_recheck_seconds: %v: %s", v, defaultSecondsProblem(v, DefaultPassiveRecheckSeconds))
	}
	if v := c.SweepSeconds; defaultSecondsProblem(v, DefaultSweepSeconds) != "" {
		return invalid(ErrSweepInterval, "sweep_seconds: %v: %s", v, defaultSecondsProblem(v, DefaultSweepSeconds))
	}
	if v := c.DrainSeconds; defaultSecondsProblem(v, DefaultDrainSeconds) != "" {
		return invalid(ErrDrainTimeout, "drain_seconds: %v: %s", v, defaultSecondsProblem(v, DefaultDrainSeconds))
	}
	if v := c.LoadReportSeconds; secondsProblem(v, true) != "" {
		return invalid(ErrLoadReportInterval, "load_report_seconds: %v: %s", v, secondsProblem(v, true))
	}
	if e := c.Tenant.SecretEnv; e != "" && !validEnvName(e) {
		return invalid(ErrTenantConfig, "tenant.secret_env: %q: not an environment variable name (letters, digits and _, not starting with a digit)", truncate(e, 64))
	}
	if c.Tenant.CacheSalt && !c.Tenant.APIKey && c.Tenant.Header == "" {
		return invalid(ErrTenantConfig, "tenant.cache_salt: true needs a tenant source (tenant.api_key or tenant.header)")
	}
	if e := c.Metrics.Exporter; e != "" && e != ExporterPrometheus && e != ExporterOTel {
		return invalid(ErrMetricsExporter, "metrics.exporter: %q: want %q or %q", e, ExporterPrometheus, ExporterOTel)
	}
	if err := c.OutlierDetection.validate(); err != nil {
		return err
	}
	if err := c.Timeouts.validate(); err != nil {
		return err
	}
	if bc := c.BackendClient; !isDirect(bc) && !strings.EqualFold(bc, BackendClientNetHTTP) {
		return invalid(ErrBackendClient, "backend_client: %q: want %q or %q", bc, BackendClientDirect, BackendClientNetHTTP)
	}
	if !validServer(c.Server) {
		return invalid(ErrServer, "server: %q: want %q or %q", c.Server, ServerDirect, ServerNetHTTP)
	}
	if err := c.Limits.validate(c.minInflightBytes()); err != nil {
		return err
	}
	return c.validateStore()
}

// saltedExtra bounds what the cache_salt splice adds to a body: the member
// "cache_salt":"<22-character salt>", (38 bytes), rounded up.
const saltedExtra = 64

// streamUsageExtra bounds what the stream_usage rewrite adds to a body: at most
// ,"stream_options":{"include_usage":true} (40 bytes), rounded up.
const streamUsageExtra = 64

// minInflightBytes is the smallest limits.max_inflight_bytes with which a request of
// max_body_bytes fits an idle gateway, and what it is made of: the body, and beside it
// the copies the request may hold — with stream_usage the one that asks for the usage,
// with tenant.cache_salt the salted one (decision: such a configuration is refused at
// load, where a request that can never fit would get 503 overloaded with Retry-After
// for ever).
func (c Config) minInflightBytes() (int64, string) {
	n := c.MaxBodyBytes
	copies, extra, what := int64(1), int64(0), ""
	switch {
	case c.Tenant.CacheSalt && c.StreamUsage:
		copies, extra = 3, saltedExtra+streamUsageExtra
		what = "tenant.cache_salt and stream_usage on: a streamed salted request holds its body, the copy that asks for its usage and the salted copy"
	case c.Tenant.CacheSalt:
		copies, extra, what = 2, saltedExtra, "tenant.cache_salt on: a salted request holds its body and the salted copy"
	case c.StreamUsage:
		copies, extra, what = 2, streamUsageExtra, "stream_usage on: a streamed request holds its body and the copy that asks for its usage"
	default:
		return n, fmt.Sprintf("max_body_bytes (%d)", n)
	}
	need := int64(math.MaxInt64)
	if n <= (math.MaxInt64-extra)/copies {
		need = copies*n + extra
	}
	return need, fmt.Sprintf("%d x max_body_bytes + %d (%d) with %s", copies, extra, need, what)
}

// SessionIDBytesCap is the largest affinity.max_session_id_bytes accepted (65,511):
// the longest session ID a binding snapshot holds (affinity.MaxSnapshotSessionIDBytes,
// 64 KiB) less [TenantTagBytes], which the Scheduler's keys carry with tenant scoping on.
// Decision: a larger value is [ErrAffinityConfig] at start and reload, whether or not
// binding_snapshot is set (an affinity reload copies the bindings through a snapshot
// too), rather than sessions that silently lose their binding at a restart or reload.
const SessionIDBytesCap = affinity.MaxSnapshotSessionIDBytes - TenantTagBytes

// MaxBackendIDBytes is the longest backends[].id accepted, in bytes. The id is a label
// value of every per-backend metric series, a log field and a response header
// (X-Agent-Serve-Backend), so it is kept short and printable.
const MaxBackendIDBytes = 256

// backendIDProblem says why id (not blank) is not a usable backend id ("" when it is):
// over MaxBackendIDBytes, not UTF-8 (a Prometheus label value must be), or holding a
// control byte (NUL, newline, DEL: they break log lines and headers).
func backendIDProblem(id string) string {
	if len(id) > MaxBackendIDBytes {
		return fmt.Sprintf("%d bytes (max %d)", len(id), MaxBackendIDBytes)
	}
	if !utf8.ValidString(id) {
		return "not valid UTF-8"
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < ' ' || c == 0x7f {
			return fmt.Sprintf("control byte %q at offset %d; want printable text", c, i)
		}
	}
	return ""
}

// validEnvName reports whether s is a POSIX environment variable name:
// [A-Za-z_][A-Za-z0-9_]*.
func validEnvName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return s != ""
}

func checkBackendURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL") // url.Parse's error repeats the URL, password included
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme must be http or https")
	}
	if u.Host == "" {
		return fmt.Errorf("missing host")
	}
	if p := u.Port(); p != "" {
		// url.Parse checks that a port is digits, not its range: 99999 would be taken
		// and fail every dial.
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port must be 1..65535")
		}
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("query and fragment are not allowed")
	}
	if u.User != nil {
		// The proxy and the prober send nothing from it: credentials would be ignored
		// silently (vLLM's --api-key is a bearer token, a header, not user:password@).
		return fmt.Errorf("user:password@ is not allowed: the gateway would not send it")
	}
	return nil
}
