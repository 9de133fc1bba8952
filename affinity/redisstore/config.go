package redisstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Errors returned by [Config.Validate] and [New]. Each wraps [ErrInvalidConfig] and names
// the key (its yaml/json name under store:) and the value; branch with errors.Is.
var (
	// ErrInvalidConfig: every configuration error.
	ErrInvalidConfig = errors.New("redisstore: invalid config")
	// ErrAddress: address is empty or not host:port with a port in 1..65535.
	ErrAddress = errors.New("redisstore: bad address")
	// ErrPasswordEnv: password_env names an environment variable that is unset or empty.
	ErrPasswordEnv = errors.New("redisstore: password environment variable unset")
	// ErrTimeout: a *_seconds key is negative, NaN, infinite, under 0.001 (1 ms) or over
	// 86400 (a day); 0 means the key's default.
	ErrTimeout = errors.New("redisstore: bad timeout")
	// ErrPrefix: prefix contains '{' or '}'. The keys put the session hash in braces (a
	// Redis Cluster hash tag); a brace in the prefix would make the prefix the hash tag
	// and put every key of the fleet in one Cluster slot (one node).
	ErrPrefix = errors.New("redisstore: bad prefix")
	// ErrTLS: tls_ca_file cannot be read or holds no PEM certificate, or a tls_* key is
	// set while tls is false.
	ErrTLS = errors.New("redisstore: bad tls setting")
)

// Defaults applied to zero fields of [Config].
const (
	// DefaultPrefix starts every key and the invalidation channel.
	DefaultPrefix = "sessionaffinity:"
	// DefaultTimeoutSeconds bounds each store call on the request path (50 ms), see
	// affinity.DefaultStoreTimeout.
	DefaultTimeoutSeconds = 0.05
	// DefaultRetryAfterSeconds: how long a Scheduler decides alone after a failed call.
	DefaultRetryAfterSeconds = 1.0
	// DefaultDialTimeoutSeconds bounds a (re)connection attempt of the background work
	// (subscription, refreshes) and the whole of [Store.Ping].
	DefaultDialTimeoutSeconds = 1.0
)

// Config is the plain-data configuration of a [Store], the gateway's `store:` block.
// The zero value is invalid (no address).
type Config struct {
	// Address is the Redis server (or any server speaking its protocol), host:port.
	// Required. With Cluster, any node of the cluster.
	Address string `yaml:"address" json:"address"`
	// Username is the ACL user ("" = the default user).
	Username string `yaml:"username" json:"username"`
	// PasswordEnv names the environment variable holding the password (read once by New);
	// "" means no password. The password itself never appears in a config file.
	PasswordEnv string `yaml:"password_env" json:"password_env"`
	// DB is the database number (0..15 on a default server; ignored with Cluster).
	DB int `yaml:"db" json:"db"`
	// Cluster talks to a Redis Cluster. Keys carry hash tags ({session hash}) so that a
	// session's bindings of all tiers live in one slot.
	Cluster bool `yaml:"cluster" json:"cluster"`
	// TLS connects with TLS (certificates verified against the system roots, or
	// TLSCAFile).
	TLS bool `yaml:"tls" json:"tls"`
	// TLSServerName overrides the name verified in the server certificate ("" = the
	// address's host). Only with TLS.
	TLSServerName string `yaml:"tls_server_name" json:"tls_server_name"`
	// TLSCAFile is a PEM file of CA certificates to trust instead of the system roots.
	// Only with TLS.
	TLSCAFile string `yaml:"tls_ca_file" json:"tls_ca_file"`
	// Prefix starts every key and the invalidation channel; "" means DefaultPrefix. Give
	// each fleet sharing one Redis its own prefix. It must not contain '{' or '}'
	// (ErrPrefix).
	Prefix string `yaml:"prefix" json:"prefix"`
	// TimeoutSeconds bounds each store call a request waits for, in seconds; 0 means
	// DefaultTimeoutSeconds (0.05). Past it the request is decided from the local table.
	TimeoutSeconds float64 `yaml:"timeout_seconds" json:"timeout_seconds"`
	// RetryAfterSeconds: after a failed call the Scheduler leaves the store alone this
	// long, in seconds; 0 means DefaultRetryAfterSeconds (1).
	RetryAfterSeconds float64 `yaml:"retry_after_seconds" json:"retry_after_seconds"`
	// DialTimeoutSeconds bounds a connection attempt, in seconds, and the whole of
	// [Store.Ping] (which may open a connection); 0 means DefaultDialTimeoutSeconds (1).
	// Request-path calls are bounded by TimeoutSeconds whatever this value.
	DialTimeoutSeconds float64 `yaml:"dial_timeout_seconds" json:"dial_timeout_seconds"`
}

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.TimeoutSeconds == 0 {
		c.TimeoutSeconds = DefaultTimeoutSeconds
	}
	if c.RetryAfterSeconds == 0 {
		c.RetryAfterSeconds = DefaultRetryAfterSeconds
	}
	if c.DialTimeoutSeconds == 0 {
		c.DialTimeoutSeconds = DefaultDialTimeoutSeconds
	}
	return c
}

// configError is a configuration error that wraps several sentinels (ErrInvalidConfig,
// its kind, maybe a cause) but says "redisstore: " once: fmt.Errorf's %w would repeat
// each sentinel's prefix ("redisstore: invalid config: redisstore: bad address: ...").
type configError struct {
	msg  string
	errs []error
}

func (e *configError) Error() string   { return e.msg }
func (e *configError) Unwrap() []error { return e.errs }

// configErr returns an error wrapping ErrInvalidConfig, each of kinds and cause (nil:
// none), whose text is "redisstore: invalid config: ", each kind's text without its
// "redisstore: " prefix, then detail and the cause's text.
func configErr(kinds []error, detail string, cause error) error {
	var b strings.Builder
	b.WriteString(ErrInvalidConfig.Error())
	errs := []error{ErrInvalidConfig}
	for _, k := range kinds {
		if k == ErrInvalidConfig {
			continue
		}
		b.WriteString(": ")
		b.WriteString(strings.TrimPrefix(k.Error(), "redisstore: "))
		errs = append(errs, k)
	}
	b.WriteString(": ")
	b.WriteString(detail)
	if cause != nil {
		b.WriteString(": ")
		b.WriteString(cause.Error())
		errs = append(errs, cause)
	}
	return &configError{msg: b.String(), errs: errs}
}

func invalid(kind error, key string, format string, args ...any) error {
	return configErr([]error{kind}, key+": "+fmt.Sprintf(format, args...), nil)
}

// Validate reports the first invalid field (after defaults) as an error wrapping
// ErrInvalidConfig and one of ErrAddress, ErrPasswordEnv, ErrPrefix, ErrTimeout, ErrTLS. It reads
// the password environment variable and the CA file but connects to nothing.
func (c Config) Validate() error {
	_, err := c.resolve()
	return err
}

// resolved is a validated Config, ready for go-redis.
type resolved struct {
	Config
	password   string
	tls        *tls.Config
	timeout    time.Duration
	retryAfter time.Duration
	dial       time.Duration
}

// Range of the *_seconds keys. Below 1 ms a timeout rounds to nothing that a Redis call
// can meet (every call timed out and the store was never used); above a day no timer
// here needs to go.
const (
	minSeconds = 0.001
	maxSeconds = 86400
)

// seconds converts the *_seconds key's value v (after defaults: 0 became def) to a
// duration, or says why it is out of range: NaN, infinite, negative, under 1 ms or over a
// day. The message names the default, since 0 is accepted for it.
func seconds(key string, v, def float64) (time.Duration, error) {
	if !(v >= minSeconds && v <= maxSeconds) { // NaN fails both
		return 0, invalid(ErrTimeout, key, "%v: must be a number of seconds, %g..%g (0 or omitted: the default, %g)",
			v, minSeconds, float64(maxSeconds), def)
	}
	return time.Duration(v * float64(time.Second)), nil
}

func (c Config) resolve() (resolved, error) {
	c = c.withDefaults()
	r := resolved{Config: c}
	host, port, err := net.SplitHostPort(c.Address)
	if err != nil || host == "" {
		return r, invalid(ErrAddress, "address", "%q is not host:port", c.Address)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return r, invalid(ErrAddress, "address", "%q: port %q out of 1..65535", c.Address, port)
	}
	if c.PasswordEnv != "" {
		r.password = os.Getenv(c.PasswordEnv)
		if r.password == "" {
			return r, invalid(ErrPasswordEnv, "password_env", "environment variable %s is unset or empty", c.PasswordEnv)
		}
	}
	if strings.ContainsAny(c.Prefix, "{}") {
		return r, invalid(ErrPrefix, "prefix", "%q contains '{' or '}': with Redis Cluster every key would hash to one slot (the session hash is the key's hash tag)", c.Prefix)
	}
	if c.DB < 0 {
		return r, invalid(ErrInvalidConfig, "db", "%d is negative", c.DB)
	}
	if r.timeout, err = seconds("timeout_seconds", c.TimeoutSeconds, DefaultTimeoutSeconds); err != nil {
		return r, err
	}
	if r.retryAfter, err = seconds("retry_after_seconds", c.RetryAfterSeconds, DefaultRetryAfterSeconds); err != nil {
		return r, err
	}
	if r.dial, err = seconds("dial_timeout_seconds", c.DialTimeoutSeconds, DefaultDialTimeoutSeconds); err != nil {
		return r, err
	}
	if !c.TLS {
		if c.TLSServerName != "" || c.TLSCAFile != "" {
			return r, invalid(ErrTLS, "tls", "tls_server_name and tls_ca_file need tls: true")
		}
		return r, nil
	}
	r.tls = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.TLSServerName}
	if r.tls.ServerName == "" {
		r.tls.ServerName = host
	}
	if c.TLSCAFile != "" {
		pem, err := os.ReadFile(c.TLSCAFile)
		if err != nil {
			return r, invalid(ErrTLS, "tls_ca_file", "%v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return r, invalid(ErrTLS, "tls_ca_file", "%q holds no PEM certificate", c.TLSCAFile)
		}
		r.tls.RootCAs = pool
	}
	return r, nil
}
