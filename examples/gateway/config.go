package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/redisstore"
	"github.com/agentserve/sessionaffinity/health"
)

// Defaults applied by [Config.WithDefaults] (and so by [ParseConfig], [LoadConfig] and [New]).
const (
	// DefaultListen is the listen address when `listen` is omitted.
	DefaultListen = "127.0.0.1:8080"
	// DefaultTierHeader is the request header naming the tier when `tier_header` is omitted.
	DefaultTierHeader = "X-Agent-Serve-Tier"
	// DefaultMaxBodyBytes caps request bodies (8 MiB) when `max_body_bytes` is omitted or 0.
	DefaultMaxBodyBytes int64 = 8 << 20
	// DefaultHealthPath is the backend health endpoint (vLLM serves GET /health).
	DefaultHealthPath = "/health"
	// DefaultPassiveRecheckSeconds is how often a passively downed backend is re-checked.
	DefaultPassiveRecheckSeconds = 5.0
	// DefaultSweepSeconds is how often expired bindings are reclaimed.
	DefaultSweepSeconds = 60.0
	// DefaultDrainSeconds is how long a graceful shutdown waits for in-flight requests.
	DefaultDrainSeconds = 10.0
)

// DefaultSessionHeaders returns the session-ID headers checked, in this order, when
// `session_headers` is omitted. The first one present on a request wins. Header names
// are case-insensitive, so "X-Session-Id" is the same header as "X-Session-ID".
//
//   - X-Session-ID: the generic header this gateway documents for its own clients.
//   - X-Claude-Code-Session-Id: sent on every request by Claude Code since v2.1.86
//     (one UUID per conversation).
//   - Session-Id: sent by the OpenAI Codex CLI (one UUID per conversation).
//   - Session_id: the older underscore form of the Codex header (note that some proxies,
//     nginx by default, drop headers with underscores).
//   - X-Opencode-Session: sent by older OpenCode clients (one stable ID per conversation).
//   - X-Session-Affinity: sent by current OpenCode clients for routing affinity (their
//     session ID). Last, so the established headers keep their precedence.
//
// A new slice is returned on every call.
func DefaultSessionHeaders() []string {
	return []string{
		"X-Session-ID",
		"X-Claude-Code-Session-Id",
		"Session-Id",
		"Session_id",
		"X-Opencode-Session",
		"X-Session-Affinity",
	}
}

// DefaultParentSessionHeaders returns the headers checked, in this order, for the parent
// session of a subagent when `parent_session_headers` is omitted: X-Parent-Session-ID
// (sent by OpenCode for subagent sessions). A new slice is returned on every call.
func DefaultParentSessionHeaders() []string { return []string{"X-Parent-Session-ID"} }

// Config is the gateway configuration, plain data decoded from YAML
// (configs/gateway.yaml). Zero values mean "use the default" where a default exists;
// see [Config.WithDefaults].
type Config struct {
	// Listen is the TCP address the gateway listens on (host:port). Default 127.0.0.1:8080.
	Listen string `yaml:"listen"`
	// AdminListen is the TCP address (host:port) of the admin listener, "" (the default)
	// for none: [Gateway.Serve] then also serves /healthz, /readyz and /metrics there,
	// on a server of its own with short timeouts of its own and outside
	// limits.max_connections, so that clients holding every main connection (slow
	// uploads) cannot starve the probes and the scrape (admin.go). The three paths stay
	// on `listen` too. It answers /healthz until Serve returns, after the main server.
	// Anything but "" or host:port with port 0..65535, or the address of `listen`, is
	// [ErrAdminListen]. Needs a restart to change ([ErrReloadNeedsRestart]).
	AdminListen string `yaml:"admin_listen"`
	// Affinity is the scheduler configuration, decoded with the library's own keys
	// (sticky_ttl_seconds, max_bindings, max_session_id_bytes, tiers). An omitted
	// sticky_ttl_seconds means the library default (1800 s); 0 turns affinity off. An
	// empty tier name under tiers is [ErrTierName] (decision: the default pool's TTL is
	// sticky_ttl_seconds; a second way to set it is a mistake more often than not).
	Affinity affinity.Config `yaml:"affinity"`
	// Backends are the inference servers. At least one is required.
	Backends []BackendConfig `yaml:"backends"`
	// SessionHeaders are checked in order; the first present, non-empty one carries the
	// session ID. Nil means [DefaultSessionHeaders]; an empty list is
	// [ErrNoSessionHeaders] (no request would carry a session: affinity would be off
	// without a word; affinity.sticky_ttl_seconds: 0 is the way to turn it off). Host,
	// Content-Length and hop-by-hop headers (Connection, Transfer-Encoding, ...) are
	// [ErrHeaderName]: net/http keeps Host and Transfer-Encoding out of the header map,
	// and the others describe the connection or the body, not a session.
	SessionHeaders []string `yaml:"session_headers"`
	// ParentSessionHeaders are checked in order for a parent session ID; the first
	// present, non-empty one is the placement hint of a session's first turn
	// (affinity.Scheduler.SelectBackendWithParent). Nil means
	// [DefaultParentSessionHeaders]; an empty list turns parent placement off.
	ParentSessionHeaders []string `yaml:"parent_session_headers"`
	// TierHeader names the request header that selects a tier. Default X-Agent-Serve-Tier.
	// The same header as one of SessionHeaders, ParentSessionHeaders or Tenant.Header, or
	// Authorization with Tenant.APIKey, is [ErrHeaderConflict] (its values would be taken
	// for tier names: 400 unknown_tier). The 400 unknown_tier message quotes the value
	// (up to 64 bytes) except when the tier header is Authorization or the tenant header:
	// a credential or tenant identity is never echoed. The value "default" names the
	// default tier "" unless a tier named "default" is configured (then that tier).
	TierHeader string `yaml:"tier_header"`
	// ModelTiers maps the request body's "model" to a tier, used when the tier header is
	// absent. An empty or blank (whitespace-only) model name or tier is [ErrTierName], at
	// load and on reload (decision: a "" key would send every request without a model,
	// GET /v1/models included, to that tier, and the tier header is the way to route
	// those; a blank key names no model, so it is a quoting slip or an unfilled template).
	ModelTiers map[string]string `yaml:"model_tiers"`
	// RequireSession rejects generation requests (POST .../chat/completions, completions,
	// responses, messages) without a session ID (JSON 400) instead of routing them
	// without a binding; other requests (GET /v1/models, ...) are always routed.
	RequireSession bool `yaml:"require_session"`
	// MaxBodyBytes caps request bodies in bytes (larger -> JSON 413). 0 means 8 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// Health configures the active prober and the passive re-check.
	Health HealthConfig `yaml:"health"`
	// RetryOnConnectError replays a failed request once when that is safe: it never
	// reached the backend (dial error, write failed) or it is replayable (idempotent
	// method or Idempotency-Key header). A stale keep-alive connection (closed before any
	// response byte) is retried on the same backend; a counted failure on the session's next HRW choice (see the package
	// doc), and, when that retry fails to connect with nothing sent, once more on a third
	// backend not tried yet. Nil means true.
	RetryOnConnectError *bool `yaml:"retry_on_connect_error"`
	// SweepSeconds is how often [Gateway.Run] reclaims expired bindings
	// (Scheduler.Sweep), in seconds, so that memory is returned even when sessions never
	// come back and no new session arrives. 0 means 60 s; negative, NaN or Inf is
	// [ErrSweepInterval].
	SweepSeconds float64 `yaml:"sweep_seconds"`
	// DrainSeconds bounds the graceful shutdown of [Gateway.Serve]: in-flight requests get
	// this long to finish before their connections are closed, in seconds. 0 means 10 s;
	// negative, NaN or Inf is [ErrDrainTimeout]. Reloadable.
	DrainSeconds float64 `yaml:"drain_seconds"`
	// BindingSnapshot is a file path: [Gateway.Serve] saves the binding table there on
	// shutdown and loads it on start, so a restart keeps every session on its backend
	// (format: affinity.SnapshotMagic, see affinity.Table.Snapshot). "" turns it off.
	// Not needed with a shared (Redis) binding store. [New] and [Gateway.Reload] check
	// that its directory exists and takes a new file (they create and remove a temporary
	// file there) and that the path is not a directory or another non-regular file (such
	// as /dev/null, which the save's rename would replace) nor an existing non-empty file
	// that is not a snapshot (not starting with "SAFSNAP" or NUL bytes: the save would
	// replace it), so a bad path is [ErrBindingSnapshot] at start or reload rather than
	// bindings or a file lost at shutdown; [Config.Validate] does no I/O and does not
	// check it. A loaded snapshot is removed (see [Gateway.Serve]); files over
	// [MaxSnapshotBytes] are not loaded.
	BindingSnapshot string `yaml:"binding_snapshot"`
	// InjectMetadata inserts the "x_agent_serve" object into non-streaming JSON
	// responses (which means reading each one whole and checking it is a JSON object).
	// Nil means true; false leaves every body untouched (streamed through as it comes),
	// and the X-Agent-Serve-* headers still say where the request went. Reloadable.
	InjectMetadata *bool `yaml:"inject_metadata"`
	// StreamUsage makes streamed chat/completions and completions turns report their
	// usage to load awareness when the client did not ask for it: a POST to
	// .../chat/completions or .../completions whose JSON body has "stream": true and
	// does not ask for "stream_options": {"include_usage": true} is sent to the backend
	// asking for it (one member added or set, every other byte kept), and the usage-only
	// chunk the backend then ends the stream with is read for the lease and not
	// forwarded, so the client gets the stream it asked for. A client that asked itself
	// gets its stream untouched. The rules and decisions: streamusage.go and docs/gateway.md.
	// Default false (a backend that rejects stream_options would answer 400). Reloadable:
	// a request uses the setting of the configuration it started with.
	StreamUsage bool `yaml:"stream_usage"`
	// OutlierDetection configures passive ejection of failing backends (see
	// [OutlierConfig]); omitted keys take its defaults.
	OutlierDetection OutlierConfig `yaml:"outlier_detection"`
	// Timeouts bounds every wait, upstream and downstream (see [TimeoutsConfig]).
	Timeouts TimeoutsConfig `yaml:"timeouts"`
	// BackendClient is the HTTP client of the backend hop when no [WithTransport] is
	// given: "direct" ([BackendClientDirect], the default for "") writes each request and
	// reads its response on the handler's goroutine over a keep-alive pool of its own
	// (HTTP/1.1 to http:// backends; about a fifth less gateway CPU per request than
	// net/http.Transport, see docs/gateway.md); "nethttp" ([BackendClientNetHTTP]) is a clone of
	// http.DefaultTransport (HTTP/2 to https:// backends, proxies from the environment).
	// Anything else is [ErrBackendClient]. Needs a restart to change.
	BackendClient string `yaml:"backend_client"`
	// Server is the HTTP/1.x server of [Gateway.Serve]'s listener: "nethttp"
	// ([ServerNetHTTP], the default for "") is net/http's http.Server; "direct"
	// ([ServerDirect]) is the gateway's own, with no per-request goroutine (less added
	// latency and CPU per request, see docs/gateway.md; a client leaving mid-request is
	// noticed within about 75 ms instead of at once). Anything else is [ErrServer].
	// Needs a restart to change. Embedders serving [Gateway.HTTPServer] themselves are
	// not concerned.
	Server string `yaml:"server"`
	// Limits bounds the memory and connections held by requests in flight (see
	// [LimitsConfig]).
	Limits LimitsConfig `yaml:"limits"`
	// LoadReportSeconds is how often [Gateway.Run] reads each backend's /metrics
	// (vllm:num_requests_waiting, vllm:num_requests_running, vllm:kv_cache_usage_perc)
	// and reports it to the scheduler (affinity.Scheduler.ReportLoad), in seconds: each
	// backend not Down on a schedule of its own, at most 20 scrapes at once (first scrapes:
	// 1 s, at most 8 at once), schedules and reports kept across reloads (docs/load-aware.md, "Load report scrapes"). 0 (the
	// default) turns it off; anything but 0 or 0.001..1e6 is [ErrLoadReportInterval]. Reloadable.
	LoadReportSeconds float64 `yaml:"load_report_seconds"`
	// Metrics selects the metrics exporter behind /metrics (see [MetricsConfig]).
	Metrics MetricsConfig `yaml:"metrics"`
	// Tenant scopes bindings (and optionally the backends' prefix caches) by tenant (see
	// [TenantConfig]). Off by default.
	Tenant TenantConfig `yaml:"tenant"`
	// Store shares bindings with the other gateway replicas on Redis (see store.go and
	// redisstore.Config for the keys: address, password_env, tls, prefix, timeouts).
	// Omitted: bindings are local to this gateway.
	Store *redisstore.Config `yaml:"store"`
}

// BackendConfig is one inference server.
type BackendConfig struct {
	// ID is the stable backend name used for hashing and bindings (required, unique). It
	// is also a metric label value, a log field and a response header, so it must be
	// printable UTF-8 of at most [MaxBackendIDBytes] bytes without control bytes (NUL,
	// newline, DEL); anything else is [ErrBackendID].
	ID string `yaml:"id"`
	// URL is the base URL, e.g. http://10.0.0.5:8000 (scheme http or https, host required).
	URL string `yaml:"url"`
	// Weight is the relative HRW weight; 0 or omitted means 1; negative is an error.
	Weight float64 `yaml:"weight"`
	// Tier is the pool this backend serves; "" is the default pool.
	Tier string `yaml:"tier"`
	// Drain, when true, drains the backend (affinity.Scheduler.OnBackendDraining,
	// operator intent): sessions bound to it keep being sent to it, new sessions and
	// requests without a session go to the other Healthy backends of its pool (to it only
	// when none is Healthy), so an operator can let its sessions finish or expire before
	// removing it. Applied by [New] and by a [Gateway.Reload] that adds the backend or
	// changes the value (false again ends the drain: affinity.Scheduler.Undrain); a
	// reload that leaves it unchanged does not touch the drain, nor does anything else
	// in the gateway. Health stays independent: a drained backend that fails its checks
	// is Down, and Draining again once it passes them. Default false. Reloadable; a
	// reload that only changes drain rebuilds nothing and moves no binding.
	Drain bool `yaml:"drain"`
}

// HealthConfig is the active prober's configuration (health.ProbeConfig, inline) plus
// an enable flag and the passive re-check interval.
type HealthConfig struct {
	// Enabled runs the active prober (GET <url><path> every interval) under [Gateway.Run].
	// Nil (a config without `health:` or without `enabled:`) means true: active checks
	// are on by default; set false to rely on outlier detection alone.
	Enabled *bool `yaml:"enabled"`
	// ProbeConfig holds path, interval_seconds, timeout_seconds, failure_threshold and
	// success_threshold; zero values take the health package's defaults.
	health.ProbeConfig `yaml:",inline"`
	// PassiveRecheckSeconds is how often backends ejected by outlier detection whose
	// ejection time is over are re-checked with GET <path>; one 2xx ends the ejection
	// (unless the active prober holds the backend down). 0 means 5 s; negative, NaN or Inf
	// is [ErrPassiveRecheck].
	PassiveRecheckSeconds float64 `yaml:"passive_recheck_seconds"`
}

// ParseConfig decodes YAML strictly (an unknown key is an error, and so is a number
// with a fractional part in an integer key such as max_body_bytes or limits.*: "is not a
// whole number", with the key and line), applies defaults and validates. Errors wrap
// [ErrInvalidConfig]; an empty document (nothing, only comments, or null) is
// [ErrNoBackends] with a message saying the config is empty; a second YAML document
// (after a `---` line) is [ErrConfigSyntax], not ignored. Cost: the document is decoded twice (typed, then as nodes).
func ParseConfig(data []byte) (Config, error) {
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		kind := ErrConfigSyntax
		if strings.Contains(err.Error(), "not found in type") { // yaml.v3's unknown-field message
			kind = ErrUnknownKey
			err = &unknownKeyError{err}
		}
		var te *yaml.TypeError
		if errors.Is(err, affinity.ErrInvalidConfig) && (kind != ErrConfigSyntax || !errors.As(err, &te)) {
			// The affinity section failed in affinity.Config.UnmarshalYAML (fractional
			// number, unknown key): name the section and drop the library's own "invalid
			// config" so the message says it once. A value of the wrong type there is
			// named by its key below, as elsewhere (tester52).
			return Config{}, invalidFrom(kind, "affinity", err, affinity.ErrInvalidConfig)
		}
		msg := err.Error()
		if kind == ErrConfigSyntax { // a value of the wrong type: name its key (config_typeerr.go)
			msg = nameTypeErrors(data, err).Error()
		}
		return Config{}, &configError{kind: kind, msg: msg, cause: err}
	}
	// Decision: a second document (after a `---` line) is an error, not ignored: its
	// keys would look applied and never be (a listen address, an unknown key).
	var second yaml.Node
	if err := dec.Decode(&second); !errors.Is(err, io.EOF) {
		msg := "a second YAML document (a `---` line after the first): the config is one document; " +
			"merge it into the first or remove it"
		if err == nil && second.Line > 0 {
			msg = fmt.Sprintf("line %d: %s", second.Line, msg)
		} else if err != nil {
			msg += ": " + err.Error()
		}
		return Config{}, &configError{kind: ErrConfigSyntax, msg: msg, cause: err}
	}
	// The typed decoding truncates a fraction in an integer key (10.9 -> 10): read the
	// document again as nodes to refuse it (config_numbers.go).
	var doc yaml.Node
	switch err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); {
	case errors.Is(err, io.EOF) || err == nil && len(doc.Content) == 1 && doc.Content[0].Tag == "!!null":
		// Said as such: "backends: at least one backend is required" read as if a
		// backends list had been written and lost (a file caught mid-copy, say).
		return Config{}, invalid(ErrNoBackends, "the config is empty (no YAML document, only comments, or null): "+
			"it needs at least a backends list")
	case err == nil:
		if err := checkWholeNumbers(&doc); err != nil {
			return Config{}, err
		}
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// LoadConfig reads the YAML file at path and calls [ParseConfig]; configuration errors
// are prefixed with path. A file that cannot be read is an error wrapping the os error
// (errors.Is(err, fs.ErrNotExist) works), not [ErrInvalidConfig]; so is a path that is not
// a regular file once symlinks are followed ([ErrConfigNotRegular]: a directory, a
// device, a FIFO, a socket; refused without reading it) and a file larger than
// [MaxConfigBytes] ([ErrConfigTooLarge]; at most MaxConfigBytes+1 bytes are read).
func LoadConfig(path string) (Config, error) {
	cfg, _, err := loadConfigFile(path)
	return cfg, err
}

// loadConfigFile is [LoadConfig] that also returns the os.FileInfo of the file it read
// (nil when it could not be read).
func loadConfigFile(path string) (Config, fs.FileInfo, error) {
	data, fi, err := readConfigFile(path)
	if err != nil {
		return Config{}, nil, err
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		var ce *configError
		if errors.As(err, &ce) { // "gateway: invalid config: <path>: <field>: ..."
			e := *ce
			e.msg = path + ": " + e.msg
			return Config{}, fi, &e
		}
		return Config{}, fi, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, fi, nil
}

// WithDefaults returns a copy with defaults filled in: listen address, session
// headers, tier header, body cap, health path and passive re-check interval.
// The affinity defaults are applied by the library itself.
func (c Config) WithDefaults() Config {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.SessionHeaders == nil {
		c.SessionHeaders = DefaultSessionHeaders()
	}
	if c.ParentSessionHeaders == nil {
		c.ParentSessionHeaders = DefaultParentSessionHeaders()
	}
	if (c.Tenant.APIKey || c.Tenant.Header != "") && c.Tenant.SecretEnv == "" {
		c.Tenant.SecretEnv = DefaultTenantSecretEnv
	}
	if c.TierHeader == "" {
		c.TierHeader = DefaultTierHeader
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.Health.Path == "" {
		c.Health.Path = DefaultHealthPath
	}
	if c.SweepSeconds == 0 {
		c.SweepSeconds = DefaultSweepSeconds
	}
	if c.Health.PassiveRecheckSeconds == 0 {
		c.Health.PassiveRecheckSeconds = DefaultPassiveRecheckSeconds
	}
	if c.DrainSeconds == 0 {
		c.DrainSeconds = DefaultDrainSeconds
	}
	if c.Health.Enabled == nil {
		c.Health.Enabled = new(true)
	}
	c.OutlierDetection = c.OutlierDetection.withDefaults()
	c.Timeouts = c.Timeouts.withDefaults()
	c.Limits = c.Limits.withDefaults()
	return c
}

// injectMetadata reports the effective inject_metadata setting (nil -> true).
func (c Config) injectMetadata() bool { return c.InjectMetadata == nil || *c.InjectMetadata }

// healthEnabled reports the effective health.enabled (nil -> true).
func (c Config) healthEnabled() bool { return c.Health.Enabled == nil || *c.Health.Enabled }

// retryOnConnectError reports the effective retry setting (nil -> true).
func (c Config) retryOnConnectError() bool {
	return c.RetryOnConnectError == nil || *c.RetryOnConnectError
}
