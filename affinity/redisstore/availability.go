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

// WithLogger logs the Store's availability on l, never one line per failed call:
//
//   - Calls (claims, rebinds, forgets, refreshes, [Store.Ping]): one WARN when a call
//     fails after calls succeeded ("redisstore: Redis unavailable: bindings are decided
//     locally ...", with the op and the error), and one INFO once Redis answers again
//     ("redisstore: Redis available again: bindings are shared", with the op): after
//     an outage it takes two successful calls, the second started after the first
//     answered, so a restart whose first answer is followed by another failure (a
//     server still starting, a stale connection) logs nothing until Redis answers for
//     good instead of INFO, WARN, INFO within a few milliseconds; a failure between them
//     is the same outage and logs nothing. Only a call that started after the last
//     change can make the next one, so calls in flight when Redis fails or comes back do
//     not make the log flap. The first outcome after [New] is not logged: check Redis
//     with [Store.Ping] at startup and report that result (so nothing is logged at
//     startup when Redis answers, and "available again" only follows an outage). A call
//     cancelled by its caller or by Close is no outcome.
//   - The invalidation subscription, which has its own connection and can fail alone (a
//     user denied SUBSCRIBE, CLIENT KILL TYPE pubsub): one WARN when it fails
//     ("redisstore: Redis unavailable to the invalidation subscription: ...", op=watch,
//     with the error), also before its first confirmation when Redis answers the
//     SUBSCRIBE with an error (NOPERM) but not when Redis is unreachable at startup
//     (Ping's to report, as for the calls), and one INFO when it is re-established
//     ("redisstore: invalidations resumed: ...", see [Store.WatchResync]). It does not
//     change the calls' availability: a full outage logs both WARNs, a cut subscription
//     only its own.
//   - A key repaired by a call: one WARN ("redisstore: key repaired: ...", see
//     [Store.Repairs]); no availability change.
//
// Safe for concurrent use (the transitions are decided atomically). nil: nothing is
// logged.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(s *Store) { s.log = l })
}

// Availability states of a Store's calls (Store.avail).
const (
	availUnknown    int32 = iota // nothing has answered or failed yet
	availUp                      // answering
	availDown                    // failing (logged if it followed availUp)
	availRecovering              // one call answered after failures; the next success is availUp
)

// begin returns the availability epoch a call to Redis starts in, for observe.
func (s *Store) begin() uint64 { return s.epoch.Load() }

// nextAvail is the calls' availability after one outcome (ok: the call succeeded) in
// state prev: a failure is availDown; a success is availRecovering after availDown and
// availUp otherwise.
func nextAvail(prev int32, ok bool) int32 {
	switch {
	case !ok:
		return availDown
	case prev == availDown:
		return availRecovering
	}
	return availUp
}

// observe records the outcome of one call to Redis (op: a metrics.StoreOp constant or
// "ping", never the subscription's) that started in epoch since (begin), and logs a
// change of availability (see WithLogger). Only a call that started after the last
// change can make the next one: calls already in flight when Redis was seen failing (or
// answering again) say nothing about what came after, and a burst of them finishing
// either way must not make the log flap. Cancellations are ignored; a deadline is a
// failure (a hung Redis). Lock-free.
func (s *Store) observe(op string, err error, since uint64) {
	if err != nil && errors.Is(err, context.Canceled) {
		return
	}
	var prev, next int32
	for {
		if since != s.epoch.Load() {
			return
		}
		prev = s.avail.Load()
		if next = nextAvail(prev, err == nil); next == prev {
			return
		}
		if s.avail.CompareAndSwap(prev, next) {
			s.epoch.Add(1)
			break
		}
	}
	if s.log == nil {
		return
	}
	switch {
	case prev == availUp && next == availDown:
		s.log.Warn("redisstore: Redis unavailable: bindings are decided locally until it answers",
			"address", s.cfg.Address, "op", op, "err", err.Error())
	case prev == availRecovering && next == availUp:
		s.log.Info("redisstore: Redis available again: bindings are shared", "address", s.cfg.Address, "op", op)
	}
}

// subscriptionLost logs the WARN of a failed subscription (the first failed receive
// since the last confirmed SUBSCRIBE, startup included; see WithLogger).
func (s *Store) subscriptionLost(err error) {
	if s.log != nil {
		s.log.Warn("redisstore: Redis unavailable to the invalidation subscription: other replicas' moves are not seen until it is back (calls that fail are decided locally)",
			"address", s.cfg.Address, "op", metrics.StoreOpWatch, "err", err.Error())
	}
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
