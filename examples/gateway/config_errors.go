package gateway

import "errors"

// Configuration errors. Every error returned by [ParseConfig], [LoadConfig],
// [Config.Validate] and [New] for a bad configuration wraps [ErrInvalidConfig] and
// one of the more specific sentinels below, and names the offending field and value.
// Branch with errors.Is.
var (
	ErrInvalidConfig    = errors.New("gateway: invalid config")                               // every configuration error
	ErrUnknownKey       = errors.New("gateway: unknown config key")                           // a YAML key Config does not have
	ErrConfigSyntax     = errors.New("gateway: malformed config (YAML syntax or value type)") // YAML that does not decode
	ErrNoBackends       = errors.New("gateway: no backends")                                  // backends is empty, or the whole config is
	ErrDuplicateBackend = errors.New("gateway: duplicate backend id")                         // two backends share an id
	ErrBackendID        = errors.New("gateway: bad backend id")                               // empty or blank, over MaxBackendIDBytes, a control byte or not UTF-8
	ErrBackendURL       = errors.New("gateway: bad backend url")                              // not http(s)://host, or has a query/fragment or user:password@
	ErrBackendWeight    = errors.New("gateway: bad backend weight")                           // negative, NaN, Inf or out of hrw's range
	ErrListenAddress    = errors.New("gateway: bad listen address")                           // not host:port with port 0..65535
	ErrMaxBodyBytes     = errors.New("gateway: bad max_body_bytes")                           // <= 0 after defaults
	ErrHeaderName       = errors.New("gateway: bad header name")                              // not an RFC 9110 token, Host, Content-Length or a hop-by-hop header, or listed twice
	ErrAffinityConfig   = errors.New("gateway: bad affinity config")                          // rejected by affinity (also wraps its error), or max_session_id_bytes over SessionIDBytesCap
	ErrHealthConfig     = errors.New("gateway: bad health config")                            // a bad health.* field (may wrap health's error)
	ErrTierName         = errors.New("gateway: bad tier name")                                // an empty or blank model_tiers key, an empty or blank model_tiers value, backends[].tier or affinity.tiers name, or a tier name over 255 bytes
	ErrPassiveRecheck   = errors.New("gateway: bad passive_recheck_seconds")                  // not a number of seconds in 0.001..1e6
	ErrSweepInterval    = errors.New("gateway: bad sweep_seconds")                            // not a number of seconds in 0.001..1e6
	ErrDrainTimeout     = errors.New("gateway: bad drain_seconds")                            // not a number of seconds in 0.001..1e6
	ErrOutlierConfig    = errors.New("gateway: bad outlier_detection config")                 // a bad outlier_detection.* field
	ErrTimeoutConfig    = errors.New("gateway: bad timeouts config")                          // a timeouts.* value not a number of seconds in 0.001..1e6
	ErrLimitsConfig     = errors.New("gateway: bad limits config")                            // a limits.* value out of range
	// ErrLoadReportInterval: load_report_seconds is not 0 or a number of seconds in 0.001..1e6.
	ErrLoadReportInterval = errors.New("gateway: bad load_report_seconds")
	ErrMetricsExporter    = errors.New("gateway: bad metrics.exporter") // not "prometheus" or "otel"
	ErrBackendClient      = errors.New("gateway: bad backend_client")   // not "direct" or "nethttp"
	ErrServer             = errors.New("gateway: bad server")           // not "direct" or "nethttp"
	ErrTenantConfig       = errors.New("gateway: bad tenant config")    // cache_salt without a tenant source, or secret_env not a variable name
	// ErrNoSessionHeaders: session_headers is an empty list (no request would carry a
	// session; omit the key for the defaults, or set affinity.sticky_ttl_seconds: 0).
	ErrNoSessionHeaders = errors.New("gateway: empty session_headers")
	// ErrHeaderConflict: tier_header is also a session, parent-session or tenant header,
	// or is Authorization while tenant.api_key keys tenants by it; or a
	// parent_session_headers entry is also a session header (a session would be its own
	// parent); or tenant.header is also a session or parent-session header (every session
	// would be a tenant of its own).
	ErrHeaderConflict = errors.New("gateway: one header configured for two roles")
	// ErrBindingSnapshot: binding_snapshot names a directory or another existing file
	// that is not a regular file (a device such as /dev/null), or an existing non-empty
	// file that is not a binding snapshot (it starts with neither "SAFSNAP" nor NUL
	// bytes), or its directory does not exist or does not take a new file (checked by
	// [New] and [Gateway.Reload]; a reload so refused leaves the old config serving and
	// the file untouched).
	ErrBindingSnapshot = errors.New("gateway: bad binding_snapshot")
	// ErrAdminListen: admin_listen is not "" nor host:port with port 0..65535, or it is
	// the address `listen` binds (its port, non-zero, on the same host or where either
	// host is all interfaces: "", 0.0.0.0 or ::), which cannot be bound twice.
	ErrAdminListen = errors.New("gateway: bad admin_listen address")
)
