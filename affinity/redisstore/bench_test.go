package redisstore_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/redisstore"
	"github.com/agentserve/sessionaffinity/affinity/redisstore/redistest"
)

// benchScheduler returns a Scheduler on the system clock, with a Store on srv when srv
// is non-nil.
func benchScheduler(b *testing.B, srv *redistest.Server) *affinity.Scheduler {
	b.Helper()
	var opts []affinity.Option
	if srv != nil {
		// A 1 s timeout: on a loaded 2-core machine a 50 ms one would turn some misses into
		// local fallbacks and measure those instead of Redis.
		st, err := redisstore.New(redisstore.Config{Address: srv.Addr(), Prefix: "bench:" + b.Name() + ":", TimeoutSeconds: 1})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.Close() })
		opts = st.SchedulerOptions()
	}
	s, err := affinity.New(affinity.Config{}, opts...)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func benchCands() []affinity.Backend {
	c := make([]affinity.Backend, 8)
	for i := range c {
		c[i] = affinity.MustBackend(fmt.Sprintf("vllm-%d", i), "", 1)
	}
	return c
}

// scriptCalls returns how many scripts (EVALSHA + EVAL) the server has run: the store's
// round trips on the request path.
func scriptCalls(b *testing.B, rdb *redis.Client) int64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(line, cmd); ok {
				v, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				n += v
			}
		}
	}
	return n
}

// BenchmarkStoreHit: SelectBackend on 1,024 bound sessions, without and with the Redis
// store in the same run. With the store a hit makes no round trip (its refresh is due
// once per TTL/8 = 225 s per session): the ratio store/none is the store's hit-path cost.
func BenchmarkStoreHit(b *testing.B) {
	srv := redistest.Start(b)
	for _, mode := range []string{"none", "redis"} {
		b.Run("store="+mode, func(b *testing.B) {
			var s *affinity.Scheduler
			if mode == "redis" {
				s = benchScheduler(b, srv)
			} else {
				s = benchScheduler(b, nil)
			}
			cands := benchCands()
			ids := make([]string, 1024)
			for i := range ids {
				ids[i] = fmt.Sprintf("%08x-hit-session-%d", i*2654435761, i)
				if _, _, err := s.SelectBackend(ids[i], "", cands); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if _, hit, err := s.SelectBackend(ids[i&1023], "", cands); err != nil || !hit {
					b.Fatal("not a hit", err)
				}
			}
		})
	}
}

// benchRun makes the session IDs of each benchmark run new to Redis.
var benchRun atomic.Int64

// BenchmarkStoreMiss: first turns of new sessions, one goroutine: the local miss plus
// the store's claim (reported as roundtrips/op, counted by the server).
func BenchmarkStoreMiss(b *testing.B) {
	srv := redistest.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { _ = rdb.Close() })
	for _, mode := range []string{"none", "redis"} {
		b.Run("store="+mode, func(b *testing.B) {
			var s *affinity.Scheduler
			if mode == "redis" {
				s = benchScheduler(b, srv)
			} else {
				s = benchScheduler(b, nil)
			}
			cands := benchCands()
			before := scriptCalls(b, rdb)
			b.ReportAllocs()
			b.ResetTimer()
			run := strconv.FormatInt(benchRun.Add(1), 10) + "-"
			for i := 0; b.Loop(); i++ {
				if _, hit, err := s.SelectBackend("miss-"+run+strconv.Itoa(i), "", cands); err != nil || hit {
					b.Fatal("not a miss", err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(scriptCalls(b, rdb)-before)/float64(b.N), "roundtrips/op")
			if s.StoreErrors() != 0 {
				b.Fatalf("%d store errors", s.StoreErrors())
			}
		})
	}
}

// BenchmarkStoreFirstTurnsParallel: throughput of first turns from GOMAXPROCS*8
// goroutines against a local Redis (ns/op is the inverse of the throughput).
func BenchmarkStoreFirstTurnsParallel(b *testing.B) {
	srv := redistest.Start(b)
	s := benchScheduler(b, srv)
	cands := benchCands()
	var next atomic.Int64
	run := strconv.FormatInt(benchRun.Add(1), 10) + "-"
	b.SetParallelism(8)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, _, err := s.SelectBackend("par-"+run+strconv.FormatInt(next.Add(1), 10), "", cands); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	if s.StoreErrors() != 0 {
		b.Fatalf("%d store errors", s.StoreErrors())
	}
}

// BenchmarkInvalidationDelay: how long after a rebind starts on one replica the other
// replica's near-cache learns of it (Rebind call to Watch callback on the other Store,
// through Redis pub/sub). Reports the median, p99 and maximum.
func BenchmarkInvalidationDelay(b *testing.B) {
	srv := redistest.Start(b)
	cfg := redisstore.Config{Address: srv.Addr(), Prefix: "inv:" + b.Name() + ":"}
	a, err := redisstore.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	other, err := redisstore.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer other.Close()
	seen := make(chan struct{}, 1)
	other.Watch(func(affinity.StoreKey, string) { seen <- struct{}{} })
	ctx := context.Background()
	if err := other.Sync(ctx); err != nil { // subscribed
		b.Fatal(err)
	}
	var delays []time.Duration
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		key := affinity.StoreKey{Session: uint64(i), Tier: 1}
		start := time.Now()
		if _, ok, err := a.Rebind(ctx, key, "", "b"+strconv.Itoa(i%2), time.Minute); err != nil || !ok {
			b.Fatal("rebind", ok, err)
		}
		<-seen
		delays = append(delays, time.Since(start))
	}
	slices.Sort(delays)
	b.ReportMetric(float64(delays[len(delays)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(delays[len(delays)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(delays[len(delays)-1].Microseconds()), "max-µs")
}

// BenchmarkRefreshDrain: how fast the refresh worker sends queued refreshes (pipelines
// of up to 256 scripts), the capacity a burst of refreshes meets, e.g. the one
// refresh per live binding's first hit after an outage or a resync. Refreshes are queued
// as fast as Refresh returns, with a Flush every 4,096 (half the queue) so that none is
// dropped. Reports refreshes/s.
func BenchmarkRefreshDrain(b *testing.B) {
	srv := redistest.Start(b)
	st, err := redisstore.New(redisstore.Config{Address: srv.Addr(), Prefix: "drain:" + b.Name() + ":"})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	if err := st.Ping(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		st.Refresh(affinity.StoreKey{Session: uint64(i), Tier: 1}, "vllm-0", time.Hour)
		if i%4096 == 4095 {
			if err := st.Flush(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := st.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	if errs, dropped := st.Errors(); errs != 0 || dropped != 0 {
		b.Fatalf("%d errors, %d dropped", errs, dropped)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "refreshes/s")
}
