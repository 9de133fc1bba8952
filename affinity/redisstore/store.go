package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/metrics"
)

// ErrClosed is returned by calls on a closed Store.
var ErrClosed = errors.New("redisstore: store closed")

// Compile-time checks.
var (
	_ affinity.Store            = (*Store)(nil)
	_ affinity.StoreForgetIf    = (*Store)(nil)
	_ affinity.StoreWatchResync = (*Store)(nil)
)

// Option configures [New]: code seams only.
type Option interface{ apply(*Store) }

type optionFunc func(*Store)

func (f optionFunc) apply(s *Store) { f(s) }

// WithRecorder counts the store's own failures (background refreshes and the
// subscription; op "refresh", "watch") in r, and each key a call repaired (under that
// call's op, see [Store.Repairs]). The Scheduler counts the failures of the calls it
// makes through its Recorder. nil: not counted (still in [Store.Errors] and
// [Store.Repairs]).
func WithRecorder(r metrics.StoreRecorder) Option {
	return optionFunc(func(s *Store) { s.rec = r })
}

// Store is an [affinity.Store] on Redis. Create it with [New], pass it to the Scheduler
// with the options from [Store.SchedulerOptions], and [Store.Close] it after the
// Scheduler's last call. All methods are safe for concurrent use.
//
// It runs two goroutines until Close: the invalidation subscriber and the refresh
// worker.
type Store struct {
	cfg     resolved
	client  redis.UniversalClient
	channel string
	self    string // this store's ID in Sync markers
	rec     metrics.StoreRecorder
	log     *slog.Logger  // nil: no availability log
	avail   atomic.Int32  // availUnknown, availUp, availDown
	epoch   atomic.Uint64 // changes of avail so far (availability.go: observe)

	mu      sync.Mutex
	watch   func(affinity.StoreKey, string) // nil until Watch
	resync  func()                          // nil until WatchResync
	syncs   map[string]chan struct{}
	syncSeq uint64

	refreshes chan refreshReq
	errors    atomic.Uint64
	repairs   atomic.Uint64
	dropped   atomic.Uint64
	received  atomic.Uint64
	resyncs   atomic.Uint64

	ps        *redis.PubSub
	cancel    context.CancelFunc
	done      sync.WaitGroup
	closeOnce sync.Once
	closed    atomic.Bool
}

// New validates cfg and returns a Store with its background goroutines running. It does
// not wait for Redis, not even for the subscription's connection (the subscriber
// goroutine opens it): a server that is down or hung now is retried in the background
// and every request-path call fails fast until it is back (see [Store.Ping] to check at
// startup, bounded by the dial timeout alone, and [WithLogger] for the availability
// log).
// Errors wrap ErrInvalidConfig.
func New(cfg Config, opts ...Option) (*Store, error) {
	r, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	uo := &redis.UniversalOptions{
		Addrs:                 []string{r.Address},
		Username:              r.Username,
		Password:              r.password,
		DB:                    r.DB,
		TLSConfig:             r.tls,
		DialTimeout:           r.dial,
		ReadTimeout:           r.dial,
		WriteTimeout:          r.dial,
		ContextTimeoutEnabled: true,
		MaxRetries:            1, // one retry on a fresh connection (e.g. after a Redis restart), within the caller's timeout
		IsClusterMode:         r.Cluster,
		DisableIdentity:       true,
	}
	s := &Store{
		cfg:       r,
		client:    redis.NewUniversalClient(uo),
		channel:   r.Prefix + "invalidate",
		self:      hex.EncodeToString(id[:]),
		syncs:     map[string]chan struct{}{},
		refreshes: make(chan refreshReq, refreshQueue),
	}
	for _, o := range opts {
		if o != nil {
			o.apply(s)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	// No channel here: go-redis would open the subscription's connection at once, and
	// its handshake waits up to the dial timeout on a server that accepts and never
	// answers, doubling the startup check (New, then Ping). The subscriber goroutine
	// subscribes.
	s.ps = s.client.Subscribe(ctx)
	s.done.Add(2)
	go s.subscribe(ctx, s.ps)
	go s.refreshLoop(ctx)
	return s, nil
}

// SchedulerOptions returns the affinity options that connect a Scheduler to s:
// WithStore(s) and WithStoreTimeouts with the configured timeout and retry interval.
func (s *Store) SchedulerOptions() []affinity.Option {
	return []affinity.Option{affinity.WithStore(s), affinity.WithStoreTimeouts(s.cfg.timeout, s.cfg.retryAfter)}
}

// Close stops the background goroutines and closes the connections. Idempotent; later
// calls of other methods fail with ErrClosed (Refresh is dropped).
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.cancel()
		_ = s.ps.Close() // a blocked receive does not watch ctx: closing unblocks it
		s.done.Wait()
		err = s.client.Close()
	})
	return err
}

// Key returns the Redis key of a binding: prefix, the session hash in a Cluster hash
// tag, the tier hash — 16 lower-case hex digits each: "sessionaffinity:{0123456789abcdef}:fedcba9876543210".
func (s *Store) Key(k affinity.StoreKey) string {
	var b strings.Builder
	b.Grow(len(s.cfg.Prefix) + 36)
	b.WriteString(s.cfg.Prefix)
	b.WriteByte('{')
	writeHex(&b, k.Session)
	b.WriteString("}:")
	writeHex(&b, k.Tier)
	return b.String()
}

func writeHex(b *strings.Builder, v uint64) {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		b.WriteByte(digits[(v>>uint(shift))&0xf])
	}
}

// message is the invalidation payload: 32 hex digits (session hash, tier hash), '=',
// the new backend ID ("" when forgotten).
func message(k affinity.StoreKey, backend string) string {
	var b strings.Builder
	b.Grow(33 + len(backend))
	writeHex(&b, k.Session)
	writeHex(&b, k.Tier)
	b.WriteByte('=')
	b.WriteString(backend)
	return b.String()
}

func parseMessage(m string) (affinity.StoreKey, string, bool) {
	if len(m) < 33 || m[32] != '=' {
		return affinity.StoreKey{}, "", false
	}
	sess, err1 := strconv.ParseUint(m[:16], 16, 64)
	tier, err2 := strconv.ParseUint(m[16:32], 16, 64)
	if err1 != nil || err2 != nil {
		return affinity.StoreKey{}, "", false
	}
	return affinity.StoreKey{Session: sess, Tier: tier}, m[33:], true
}

func px(ttl time.Duration) int64 {
	if ms := ttl.Milliseconds(); ms > 0 {
		return ms
	}
	return 1
}

// Claim implements [affinity.Store.Claim]: one EVALSHA (GET; PEXPIRE or SET PX). A key
// that holds no binding record (see [Store.Repairs]) is overwritten as if absent.
func (s *Store) Claim(ctx context.Context, key affinity.StoreKey, backendID string, ttl time.Duration) (string, bool, error) {
	if s.closed.Load() {
		return "", false, ErrClosed
	}
	since := s.begin()
	v, err := claimScript.Run(ctx, s.client, []string{s.Key(key)}, backendID, px(ttl)).Result()
	s.observe(metrics.StoreOpClaim, err, since)
	return s.setReply(metrics.StoreOpClaim, key, v, err)
}

// Rebind implements [affinity.Store.Rebind]: one EVALSHA (GET, compare, SET PX, PUBLISH).
// A key that holds no binding record (see [Store.Repairs]) is overwritten as if absent.
func (s *Store) Rebind(ctx context.Context, key affinity.StoreKey, old, backendID string, ttl time.Duration) (string, bool, error) {
	if s.closed.Load() {
		return "", false, ErrClosed
	}
	since := s.begin()
	v, err := rebindScript.Run(ctx, s.client, []string{s.Key(key)}, old, backendID, px(ttl), s.channel, message(key, backendID)).Result()
	s.observe(metrics.StoreOpRebind, err, since)
	return s.setReply(metrics.StoreOpRebind, key, v, err)
}

// Forget implements [affinity.Store.Forget]: one EVALSHA (DEL, PUBLISH).
func (s *Store) Forget(ctx context.Context, key affinity.StoreKey) error {
	if s.closed.Load() {
		return ErrClosed
	}
	since := s.begin()
	err := forgetScript.Run(ctx, s.client, []string{s.Key(key)}, s.channel, message(key, "")).Err()
	s.observe(metrics.StoreOpForget, err, since)
	return err
}

// ForgetIf implements [affinity.StoreForgetIf]: one EVALSHA (GET, compare with
// backendID, then DEL and PUBLISH only if equal). Counted as the forget op. A key that
// holds no binding record (see [Store.Repairs]) is deleted (without a message: no
// replica holds it) and reported as not forgotten.
func (s *Store) ForgetIf(ctx context.Context, key affinity.StoreKey, backendID string) (bool, error) {
	if s.closed.Load() {
		return false, ErrClosed
	}
	since := s.begin()
	v, err := forgetIfScript.Run(ctx, s.client, []string{s.Key(key)}, backendID, s.channel, message(key, "")).Result()
	s.observe(metrics.StoreOpForget, err, since)
	if err != nil {
		return false, err
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return false, errUnexpectedReply
	}
	s.checkRepair(metrics.StoreOpForget, key, a[1])
	n, _ := a[0].(int64)
	return n == 1, nil
}

// Errors returns how many background calls failed (refreshes, subscription), and how
// many refreshes were dropped on a full queue (included in the first number).
func (s *Store) Errors() (errors, dropped uint64) { return s.errors.Load(), s.dropped.Load() }

// Received returns how many invalidation messages the subscriber has delivered.
func (s *Store) Received() uint64 { return s.received.Load() }

func (s *Store) fail(op string) {
	s.errors.Add(1)
	if s.rec != nil {
		s.rec.StoreError(op)
	}
}
