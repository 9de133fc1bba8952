package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/agentserve/sessionaffinity/metrics"
)

// ErrRejected is returned (wrapped, with ErrInvalidConfig) by [Store.Ping] when Redis
// answers but refuses the connection settings: a wrong username or password
// (WRONGPASS, NOAUTH, NOPERM, an AUTH without a server password) or a database number
// the server does not have. Ping checks the handshake and PING only: a user denied the
// store's other commands (EVALSHA, SUBSCRIBE) passes it, and those calls fail later. Unlike an unreachable server, this does not heal: it is a
// configuration error. The message names the store keys to check.
var ErrRejected = errors.New("redisstore: Redis rejected the connection settings")

// rejection returns the store keys an error reply of the connection handshake points
// at ("" when it is not a rejection of the settings).
func rejection(err error) string {
	var re redis.Error
	if !errors.As(err, &re) {
		return ""
	}
	msg := re.Error()
	switch {
	case strings.HasPrefix(msg, "WRONGPASS"), strings.HasPrefix(msg, "NOAUTH"), strings.HasPrefix(msg, "NOPERM"),
		strings.HasPrefix(msg, "ERR AUTH"), strings.HasPrefix(msg, "ERR invalid password"),
		strings.HasPrefix(msg, "ERR Client sent AUTH"):
		return "username/password_env"
	case strings.Contains(msg, "DB index"):
		return "db"
	}
	return ""
}

// Ping checks that Redis answers, within the dial timeout (dial_timeout_seconds, 1 s by
// default: it may open a connection, with TLS and AUTH) or ctx's deadline if sooner;
// call it at startup. It returns nil, an error wrapping [ErrRejected] and
// [ErrInvalidConfig] when the server refuses the credentials or the database number (a
// configuration error), [ErrClosed] after Close, or the connection error (unreachable,
// timed out: the Store keeps retrying in the background). The outcome counts for the availability log of
// [WithLogger].
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.dial)
	defer cancel()
	since := s.begin()
	err := s.client.Ping(ctx).Err()
	s.observe("ping", err, since)
	if keys := rejection(err); keys != "" {
		return configErr([]error{ErrRejected}, keys+" ("+s.cfg.Address+")", err)
	}
	return err
}

// WithLogger logs the Store's availability changes on l: one WARN when a call to Redis
// fails after calls succeeded ("redisstore: Redis unavailable", with the op and the
// error; when the failed call is the invalidation subscription's, op=watch, the message
// says so: claims and refreshes may still be answered), one INFO when a call succeeds again after failures ("redisstore: Redis
// available again: bindings are shared", with the op); never one line per failed call.
// Safe for concurrent use (the transitions are decided atomically; only a call that
// started after the last change can make the next one, so calls in flight when Redis
// fails or comes back do not make the log flap). The first outcome
// after [New] is not logged: check Redis with [Store.Ping] at startup and report that
// result. A call cancelled by its caller or by Close is no outcome. It also logs one INFO
// each time the subscription is re-established after a failure ("redisstore:
// invalidations resumed: ...", see [Store.WatchResync]).
// nil: nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(s *Store) { s.log = l })
}

// Availability states of a Store (Store.avail).
const (
	availUnknown int32 = iota // nothing has answered or failed yet
	availUp
	availDown
)

// begin returns the availability epoch a call to Redis starts in, for observe.
func (s *Store) begin() uint64 { return s.epoch.Load() }

// observe records the outcome of one call to Redis (op: a metrics.StoreOp constant or
// "ping") that started in epoch since (begin), and logs a change of availability. Only
// a call that started after the last change can make the next one: calls already in
// flight when Redis was seen failing (or answering again) say nothing about what came
// after, and a burst of them finishing either way must not make the log flap.
// Cancellations are ignored; a deadline is a failure (a hung Redis). Lock-free.
func (s *Store) observe(op string, err error, since uint64) {
	if err != nil && errors.Is(err, context.Canceled) {
		return
	}
	next := availUp
	if err != nil {
		next = availDown
	}
	var prev int32
	for {
		if since != s.epoch.Load() {
			return
		}
		if prev = s.avail.Load(); prev == next {
			return
		}
		if s.avail.CompareAndSwap(prev, next) {
			s.epoch.Add(1)
			break
		}
	}
	if prev == availUnknown || s.log == nil {
		return
	}
	if next == availDown {
		msg := "redisstore: Redis unavailable: bindings are decided locally until it answers"
		if op == metrics.StoreOpWatch { // claims and refreshes may still work: say what is known
			msg = "redisstore: Redis unavailable to the invalidation subscription: other replicas' moves are not seen until it is back (calls that fail are decided locally)"
		}
		s.log.Warn(msg, "address", s.cfg.Address, "op", op, "err", err.Error())
		return
	}
	s.log.Info("redisstore: Redis available again: bindings are shared", "address", s.cfg.Address, "op", op)
}

// PrintfLogger adapts a slog.Logger to go-redis's logger interface (Printf(ctx,
// format, args...)): each message becomes one record at Level whose message is the
// formatted text (its "redis: " prefix dropped) and whose attribute logger=go-redis
// names its source. go-redis has one process-wide logger: a command installs it
// once, e.g. redis.SetLogger(redisstore.PrintfLogger{Logger: l, Level: slog.LevelDebug}).
// Safe for concurrent use if Logger is. A nil Logger discards.
type PrintfLogger struct {
	Logger *slog.Logger // where the records go; nil discards every message
	Level  slog.Level   // the records' level; the zero value is slog.LevelInfo
}

// Printf logs one go-redis message.
func (p PrintfLogger) Printf(ctx context.Context, format string, v ...any) {
	if p.Logger == nil || !p.Logger.Enabled(ctx, p.Level) {
		return
	}
	p.Logger.Log(ctx, p.Level, strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "), "logger", "go-redis")
}
