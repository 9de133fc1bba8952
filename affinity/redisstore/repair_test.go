package redisstore_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
	"github.com/agentserve/sessionaffinity/affinity/redisstore"
	"github.com/agentserve/sessionaffinity/affinity/redisstore/redistest"
	"github.com/agentserve/sessionaffinity/hrw"
)

// poisons are values another program may leave under a binding's key: no binding record.
var poisons = []struct {
	name  string
	write func(ctx context.Context, rdb *redis.Client, key string) error
	found string // the "found" attribute of the repair's log line
}{
	{"hash", func(ctx context.Context, rdb *redis.Client, key string) error {
		return rdb.HSet(ctx, key, "f", "b0").Err()
	}, "found=hash"},
	{"list", func(ctx context.Context, rdb *redis.Client, key string) error {
		return rdb.RPush(ctx, key, "b0").Err()
	}, "found=list"},
	{"10 MB string", func(ctx context.Context, rdb *redis.Client, key string) error {
		return rdb.Set(ctx, key, strings.Repeat("x", 10<<20), 0).Err()
	}, `found="string of 10485760 bytes"`},
	{"one byte over the record limit", func(ctx context.Context, rdb *redis.Client, key string) error {
		return rdb.Set(ctx, key, strings.Repeat("b", redisstore.MaxRecordBytes+1), 0).Err()
	}, `found="string of 4097 bytes"`},
}

// A key of the wrong type or with a value far over any binding record is a problem of
// that key, not of Redis (tester36): the turn that finds it binds the session and writes
// Redis (the claim overwrites the key in its one script), the store stays in use (a
// second new session at the same instant is written to Redis at once, no retry
// interval), and the repair is logged once at WARN and counted as a claim error.
// Before, the claim failed (WRONGTYPE, or a 10 MB reply past the 50 ms timeout), the
// replica logged "Redis unavailable" and decided every session locally for
// retry_after_seconds, and the key was never repaired.
func TestPoisonedKeyRepairedByTheTurn(t *testing.T) {
	for _, p := range poisons {
		t.Run(p.name, func(t *testing.T) {
			srv := redistest.Start(t)
			var buf syncBuffer
			rec := &opCounter{}
			st, err := redisstore.New(redisstore.Config{Address: srv.Addr()}, // the default 50 ms timeout
				redisstore.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))), redisstore.WithRecorder(rec))
			require.NoError(t, err)
			defer st.Close()
			clk := affinitytest.NewClock(t0)
			s, err := affinity.New(affinity.Config{}, append(st.SchedulerOptions(), affinity.WithClock(clk))...)
			require.NoError(t, err)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer rdb.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			require.NoError(t, st.Ping(ctx))
			keyOf := func(sess string) string {
				return st.Key(affinity.StoreKey{Session: hrw.KeyHash(sess), Tier: hrw.KeyHash("")})
			}
			require.NoError(t, p.write(ctx, rdb, keyOf("poisoned")))
			cands := []affinity.Backend{affinity.MustBackend("b0", "", 1), affinity.MustBackend("b1", "", 1)}

			b, hit, err := s.SelectBackend("poisoned", "", cands)
			require.NoError(t, err)
			require.False(t, hit)
			v, err := rdb.Get(ctx, keyOf("poisoned")).Result()
			require.NoError(t, err, "the key holds a binding again")
			require.Equal(t, b.ID(), v)
			require.Zero(t, s.StoreErrors(), "the Scheduler's call succeeded")

			b2, _, err := s.SelectBackend("fresh", "", cands) // same instant: no retry interval runs
			require.NoError(t, err)
			v, err = rdb.Get(ctx, keyOf("fresh")).Result()
			require.NoError(t, err, "the store stayed in use: the next new session is shared at once")
			require.Equal(t, b2.ID(), v)

			lines := buf.lines()
			require.Len(t, lines, 1, "one line for the repair: %q", lines)
			require.Contains(t, lines[0], "level=WARN")
			require.Contains(t, lines[0], "redisstore: key repaired")
			require.Contains(t, lines[0], "op=claim")
			require.Contains(t, lines[0], "key="+keyOf("poisoned"))
			require.Contains(t, lines[0], p.found)
			require.NotContains(t, lines[0], "poisoned", "the session ID is not logged")
			require.Equal(t, 1, rec.count("claim"), "counted as a claim error")
			require.Equal(t, uint64(1), st.Repairs())
		})
	}
}

// Every script that reads a binding treats a key holding none as absent, atomically:
// claim and rebind overwrite it, refresh re-creates its binding, forgetIf deletes it.
// A string of exactly MaxRecordBytes is still a value (a backend ID of the maximum
// length), adopted and compared as before.
func TestScriptsRepairPoisonedKeys(t *testing.T) {
	f := newFleet(t, 1, affinity.Config{})
	st := f.stores[0]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ops := []struct {
		name string
		run  func(t *testing.T, key affinity.StoreKey)
		want string // the key's value afterwards ("": deleted)
	}{
		{"claim", func(t *testing.T, key affinity.StoreKey) {
			got, claimed, err := st.Claim(ctx, key, "b0", time.Minute)
			require.NoError(t, err)
			require.True(t, claimed)
			require.Equal(t, "b0", got)
		}, "b0"},
		{"rebind", func(t *testing.T, key affinity.StoreKey) {
			got, rebound, err := st.Rebind(ctx, key, "b9", "b1", time.Minute)
			require.NoError(t, err)
			require.True(t, rebound, "no binding: the compare-and-set succeeds as on an absent key")
			require.Equal(t, "b1", got)
		}, "b1"},
		{"refresh", func(t *testing.T, key affinity.StoreKey) {
			st.Refresh(key, "b2", time.Minute)
			require.NoError(t, st.Flush(ctx))
		}, "b2"},
		{"forgetIf", func(t *testing.T, key affinity.StoreKey) {
			forgotten, err := st.ForgetIf(ctx, key, "b0")
			require.NoError(t, err)
			require.False(t, forgotten, "it held no binding to b0")
		}, ""},
	}
	n := uint64(0)
	for _, op := range ops {
		for _, p := range poisons {
			t.Run(op.name+"/"+p.name, func(t *testing.T) {
				n++
				key := affinity.StoreKey{Session: n}
				require.NoError(t, p.write(ctx, f.rdb, st.Key(key)))
				op.run(t, key)
				v, err := f.rdb.Get(ctx, st.Key(key)).Result()
				if op.want == "" {
					require.ErrorIs(t, err, redis.Nil)
				} else {
					require.NoError(t, err)
					require.Equal(t, op.want, v)
					ttl, err := f.rdb.PTTL(ctx, st.Key(key)).Result()
					require.NoError(t, err)
					require.Positive(t, ttl, "written with its TTL")
				}
				require.Equal(t, n, st.Repairs())
			})
		}
	}

	maxID := strings.Repeat("m", redisstore.MaxRecordBytes)
	key := affinity.StoreKey{Session: 1 << 40}
	require.NoError(t, f.rdb.Set(ctx, st.Key(key), maxID, time.Minute).Err())
	got, claimed, err := st.Claim(ctx, key, "b0", time.Minute)
	require.NoError(t, err)
	require.False(t, claimed)
	require.Equal(t, maxID, got, "a value of MaxRecordBytes is a binding")
	require.Equal(t, n, st.Repairs())
}
