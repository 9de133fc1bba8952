package redisstore_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/redisstore"
	"github.com/agentserve/sessionaffinity/affinity/redisstore/redistest"
)

// requirePass sets the server's password (CONFIG SET requirepass).
func requirePass(t *testing.T, addr, pass string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	require.NoError(t, c.ConfigSet(context.Background(), "requirepass", pass).Err())
}

// TestPing: Ping tells a configuration Redis refuses (ErrRejected, naming the keys) from
// a Redis that does not answer (a plain connection error, not ErrRejected).
func TestPing(t *testing.T) {
	t.Setenv("REDISSTORE_TEST_PASSWORD", "wrong")
	for _, tc := range []struct {
		name     string
		serverPW string // "": no password on the server
		cfg      redisstore.Config
		keys     string // "" with rejected false
		rejected bool
		ok       bool
	}{
		{name: "ok", cfg: redisstore.Config{}, ok: true},
		{name: "wrong password", serverPW: "sekrit", cfg: redisstore.Config{PasswordEnv: "REDISSTORE_TEST_PASSWORD"}, keys: "password_env", rejected: true},
		{name: "no password", serverPW: "sekrit", cfg: redisstore.Config{}, keys: "password_env", rejected: true},
		{name: "unknown user", cfg: redisstore.Config{Username: "nobody", PasswordEnv: "REDISSTORE_TEST_PASSWORD"}, keys: "password_env", rejected: true},
		{name: "db out of range", cfg: redisstore.Config{DB: 99}, keys: "db", rejected: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			if tc.serverPW != "" {
				requirePass(t, srv.Addr(), tc.serverPW)
			}
			cfg := tc.cfg
			cfg.Address = srv.Addr()
			st, err := redisstore.New(cfg)
			require.NoError(t, err)
			defer st.Close()
			err = st.Ping(context.Background())
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, redisstore.ErrRejected)
			require.ErrorIs(t, err, redisstore.ErrInvalidConfig)
			require.Contains(t, err.Error(), tc.keys)
			require.Equal(t, 1, strings.Count(err.Error(), "redisstore:"), err.Error())
			require.ErrorAs(t, err, new(redis.Error), "Redis's reply is wrapped")
		})
	}
	unreachable := map[string]func(*testing.T) string{
		"nothing listening": func(t *testing.T) string { srv := redistest.Start(t); srv.Stop(); return srv.Addr() },
		"silent":            silentServer,
	}
	for name, addr := range unreachable {
		t.Run(name, func(t *testing.T) {
			st, err := redisstore.New(redisstore.Config{Address: addr(t), DialTimeoutSeconds: 0.2})
			require.NoError(t, err)
			defer st.Close()
			err = st.Ping(context.Background())
			require.Error(t, err)
			require.NotErrorIs(t, err, redisstore.ErrRejected)
			require.NotErrorIs(t, err, redisstore.ErrInvalidConfig)
		})
	}
}

// TestStartupCheckBounded: the startup check, New then Ping, takes at most
// dial_timeout_seconds (plus a margin for a loaded test machine), also against a server
// that accepts connections and never answers (a hung or SIGSTOPped Redis). New waits
// for nothing: it used to open the subscription's connection itself, whose handshake
// waited the dial timeout before Ping waited its own, twice the documented bound.
func TestStartupCheckBounded(t *testing.T) {
	const dial = time.Second
	for _, tc := range []struct {
		name string
		addr func(*testing.T) string
	}{
		{"silent", silentServer},
		{"nothing listening", func(t *testing.T) string { srv := redistest.Start(t); srv.Stop(); return srv.Addr() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := tc.addr(t)
			start := time.Now()
			st, err := redisstore.New(redisstore.Config{Address: addr, DialTimeoutSeconds: dial.Seconds()})
			require.NoError(t, err)
			defer st.Close()
			tookNew := time.Since(start)
			err = st.Ping(context.Background())
			took := time.Since(start)
			require.Error(t, err)
			require.Less(t, took, dial*19/10, "New and Ping took more than dial_timeout_seconds (the old code: twice it)")
			require.Less(t, tookNew, dial/2, "New waited for Redis")
		})
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use (the Store logs from its
// goroutines).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.FieldsFunc(b.b.String(), func(r rune) bool { return r == '\n' })
}

// TestAvailabilityLog: Redis stops, many calls fail, Redis comes back: one WARN for the
// calls and one for the subscription (its own connection, reported apart since
// tester36) when it goes, one INFO when the calls are answered again, nothing per failed
// call, nothing for the first (startup) outcome.
func TestAvailabilityLog(t *testing.T) {
	srv := redistest.Start(t)
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	// retry_after 60 s: the subscriber, after its one failure when Redis stops, waits
	// past the end of the test.
	st, err := redisstore.New(redisstore.Config{Address: srv.Addr(), RetryAfterSeconds: 60, DialTimeoutSeconds: 0.5},
		redisstore.WithLogger(log))
	require.NoError(t, err)
	defer st.Close()
	require.NoError(t, st.Ping(context.Background()))
	claim := func(i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, _, err := st.Claim(ctx, affinity.StoreKey{Session: uint64(i)}, "a", time.Minute)
		return err
	}
	require.NoError(t, claim(0))
	require.Empty(t, buf.lines(), "the first outcome and successes are not logged")

	srv.Stop()
	for i := range 5 {
		require.Error(t, claim(i))
	}
	st.Refresh(affinity.StoreKey{Session: 1}, "a", time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, st.Flush(ctx)) // a failed refresh, too
	// The subscriber's WARN may come a moment after the calls' (its receive fails on its
	// own connection): wait for it, then require exactly these two.
	require.Eventually(t, func() bool { return len(buf.lines()) >= 2 }, 10*time.Second, 10*time.Millisecond)
	lines := buf.lines()
	require.Len(t, lines, 2, "one line per feed for the outage: %q", lines)
	calls, watch := lines[0], lines[1]
	if strings.Contains(calls, "op=watch") {
		calls, watch = watch, calls
	}
	for _, l := range lines {
		require.Contains(t, l, "level=WARN")
		require.Contains(t, l, "redisstore: Redis unavailable")
		require.Contains(t, l, srv.Addr())
	}
	require.Contains(t, calls, "bindings are decided locally")
	require.Contains(t, watch, "unavailable to the invalidation subscription")
	require.Contains(t, watch, "op=watch")

	srv.Restart()
	// go-redis backs off dialling after failures: retry until a call goes through.
	require.Eventually(t, func() bool { return claim(100) == nil }, 10*time.Second, 50*time.Millisecond)
	require.NoError(t, claim(101))
	lines = buf.lines()
	require.Len(t, lines, 3, "one line for the recovery: %q", lines)
	require.Contains(t, lines[2], "level=INFO")
	require.Contains(t, lines[2], "redisstore: Redis available again")
}

// TestPrintfLogger: go-redis's messages become slog records at the chosen level.
func TestPrintfLogger(t *testing.T) {
	var buf syncBuffer
	l := redisstore.PrintfLogger{Logger: slog.New(slog.NewTextHandler(&buf, nil)), Level: slog.LevelWarn}
	l.Printf(context.Background(), "redis: pool: failed to dial after %d attempts", 5)
	redisstore.PrintfLogger{Logger: l.Logger, Level: slog.LevelDebug}.Printf(context.Background(), "dropped")
	redisstore.PrintfLogger{}.Printf(context.Background(), "no logger")
	lines := buf.lines()
	require.Len(t, lines, 1)
	require.Contains(t, lines[0], `level=WARN msg="pool: failed to dial after 5 attempts" logger=go-redis`)
}

// A user that may only PING (tester36): the failed SUBSCRIBE at startup gets its WARN,
// the successful Ping logs nothing (nothing was unavailable to the calls: no "available
// again"), and the first failed claim gets the calls' WARN. Before, the SUBSCRIBE's
// failure was the silent first outcome and the Ping then logged "Redis available again".
func TestStartupLogPingOnlyUser(t *testing.T) {
	srv := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "pingonly", "on", ">pingpw", "resetchannels", "-@all", "+ping", "+hello", "+auth").Err())
	t.Setenv("REDISSTORE_TEST_PASSWORD", "pingpw")
	var buf syncBuffer
	rec := &opCounter{}
	st, err := redisstore.New(redisstore.Config{Address: srv.Addr(), Username: "pingonly", PasswordEnv: "REDISSTORE_TEST_PASSWORD", RetryAfterSeconds: 60},
		redisstore.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))), redisstore.WithRecorder(rec))
	require.NoError(t, err)
	defer st.Close()
	require.NoError(t, st.Ping(ctx))
	require.Eventually(t, func() bool { return rec.count("watch") > 0 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, st.Ping(ctx))
	lines := buf.lines()
	require.Len(t, lines, 1, "only the subscription's failure: %q", lines)
	require.Contains(t, lines[0], "level=WARN")
	require.Contains(t, lines[0], "unavailable to the invalidation subscription")
	require.Contains(t, lines[0], "op=watch")
	require.Contains(t, lines[0], "NOPERM")

	_, _, err = st.Claim(ctx, affinity.StoreKey{Session: 1}, "b0", time.Minute)
	require.ErrorContains(t, err, "NOPERM")
	lines = buf.lines()
	require.Len(t, lines, 2, "the calls' WARN: %q", lines)
	require.Contains(t, lines[1], "level=WARN")
	require.Contains(t, lines[1], "redisstore: Redis unavailable: bindings are decided locally")
	require.Contains(t, lines[1], "op=claim")
	for _, l := range lines {
		require.NotContains(t, l, "available again")
	}
}

// Redis unreachable at startup: the subscription's failure is not logged (like the
// calls' first outcome, it is the startup Ping's to report: the gateway logs "Redis
// unreachable at start" once), only counted.
func TestStartupLogRedisUnreachable(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	var buf syncBuffer
	rec := &opCounter{}
	st, err := redisstore.New(redisstore.Config{Address: srv.Addr(), RetryAfterSeconds: 60, DialTimeoutSeconds: 0.2},
		redisstore.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))), redisstore.WithRecorder(rec))
	require.NoError(t, err)
	defer st.Close()
	require.Error(t, st.Ping(context.Background()))
	require.Eventually(t, func() bool { return rec.count("watch") > 0 }, 10*time.Second, 10*time.Millisecond)
	require.Empty(t, buf.lines())
}
