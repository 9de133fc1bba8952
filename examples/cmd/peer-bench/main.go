// Command peer-bench compares the example affinity gateway with HAProxy and nginx doing
// consistent hashing on X-Session-ID, in front of the same fakevllm simulators on
// loopback, and prints one table. Run it with `make peers` (which installs haproxy and
// nginx with apt-get when missing and builds the gateway):
//
//	go run -C examples ./cmd/peer-bench -gateway-bin /tmp/affinity-gateway
//
// Scenarios, each with fresh simulators and a fresh proxy, warmed up with 5 unmeasured
// turns per client before the measured ones:
//
//   - steady: 30 sessions x 12 turns at concurrency 6; a warm turn is one whose prompt
//     prefix was cached on the backend (cached_tokens > 0).
//   - failover: 30 sessions x 15 turns; one backend is killed while round 5 is in
//     flight and restarted after round 9 (then 3 s for health checks to see it).
//   - scale-out: 3 backends, 30 sessions x 10 turns; a 4th backend is added by a
//     config reload after round 4 (then 2 s to settle).
//   - overhead (3 interleaved runs per proxy, medians): instant simulators (no simulated
//     prefill/decode); 20,000 small requests at concurrency 32 (req/s, proxy CPU per
//     request from /proc/<pid>/stat utime+stime of the proxy and its worker processes)
//     and 2,000 at concurrency 1 (added latency: p50 through the proxy minus p50
//     straight to a simulator; the two alternate in 10 blocks of 200), with the proxy's
//     context switches and CPU time per request at c=1 (all its threads and workers).
//
// Everything listens on 127.0.0.1; every process it starts is stopped by its PID.
// The numbers are simulator numbers on whatever machine runs it: compare the ratios.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/agentserve/sessionaffinity/examples/fakevllm"
)

var showSlow *bool

type proxyKind struct {
	name    string
	start   func(ctx context.Context, dir string, port int, bs []*backendSrv) (*proc, error)
	rewrite func(p *proc, port int, bs []*backendSrv) error
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "peer-bench:", err)
		os.Exit(1)
	}
}

func run() error {
	gwBin := flag.String("gateway-bin", "", "path to a built affinity-gateway binary (required)")
	cpuProfile := flag.String("gateway-cpuprofile", "", "write the gateway's CPU profile of the overhead run here")
	overheadN := flag.Int("overhead-requests", 20000, "requests of the concurrency-32 overhead run")
	overheadRuns := flag.Int("overhead-runs", 3, "overhead runs per proxy, interleaved; the table shows the medians")
	env := flag.String("gateway-env", "", "extra environment for the gateway process, e.g. GOMAXPROCS=1 or GOGC=200")
	showSlow = flag.Bool("show-slow", false, "print the 5 slowest turns after the failover recovery")
	flag.BoolVar(&gatewayMetadata, "gateway-metadata", true, "gateway inject_metadata (false: headers only, bodies untouched)")
	flag.StringVar(&gatewayClient, "gateway-backend-client", "", "gateway backend_client: direct or nethttp (\"\": the gateway's default, direct)")
	flag.StringVar(&gatewayServer, "gateway-server", "direct", "gateway server: direct or nethttp (\"\": omitted, the gateway's default, nethttp; for binaries without the key)")
	only := flag.String("only", "", "run one scenario: steady, failover, scaleout or overhead")
	flag.Parse()
	if *gwBin == "" {
		return fmt.Errorf("-gateway-bin is required (see make peers)")
	}
	if *env != "" {
		gatewayEnv = strings.Fields(*env)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := os.MkdirTemp("", "peer-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)

	kinds := []proxyKind{
		{"gateway", func(ctx context.Context, dir string, port int, bs []*backendSrv) (*proc, error) {
			var extra []string
			if *cpuProfile != "" && filepath.Base(dir) == "gateway-overhead" {
				extra = []string{"-cpuprofile", *cpuProfile}
			}
			return startGateway(ctx, *gwBin, dir, port, bs, extra...)
		}, rewriteGateway},
		{"haproxy", startHAProxy, rewriteHAProxy},
		{"nginx", func(ctx context.Context, dir string, port int, bs []*backendSrv) (*proc, error) {
			return startNginx(ctx, dir, port, bs)
		}, rewriteNginx},
	}
	tab := newTable([]string{"gateway", "haproxy", "nginx"})
	scenarios := []struct {
		name string
		fn   func(context.Context, proxyKind, string, *table) error
	}{{"steady", steady}, {"failover", failover}, {"scaleout", scaleOut}, {"overhead", nil}}
	samples := map[string]*overheadSamples{}
	// Scenario by scenario, every proxy in turn: background load on the machine drifts
	// over minutes, so the proxies of one row run close together.
	for _, sc := range scenarios {
		if *only != "" && *only != sc.name {
			continue
		}
		runs := 1
		if sc.fn == nil {
			runs = max(1, *overheadRuns)
		}
		for run := range runs {
			for _, k := range kinds {
				dir := filepath.Join(root, k.name+"-"+sc.name)
				if run > 0 {
					dir += fmt.Sprint("-", run+1)
				}
				if err := os.MkdirAll(dir, 0o700); err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "== %s: %s (run %d)\n", sc.name, k.name, run+1)
				var err error
				if sc.fn == nil {
					if samples[k.name] == nil {
						samples[k.name] = &overheadSamples{}
					}
					err = overhead(ctx, k, dir, samples[k.name], *overheadN)
				} else {
					err = sc.fn(ctx, k, dir, tab)
				}
				if err != nil {
					return fmt.Errorf("%s %s: %w", k.name, sc.name, err)
				}
			}
		}
	}
	for _, k := range kinds {
		if o := samples[k.name]; o != nil {
			o.report(k.name, tab)
		}
	}
	tab.print(os.Stdout)
	return nil
}

// simConfig: simulated latency 100x faster than the fakevllm defaults (a cold 1,000-token
// prompt prefills in about 10 ms, a warm turn takes a few ms).
var simConfig = fakevllm.Config{TimeScale: 0.01, MaxConcurrent: 8}

func startBackends(n int, cfg fakevllm.Config, opts ...fakevllm.Option) ([]*backendSrv, error) {
	var bs []*backendSrv
	for i := range n {
		b, err := startBackend(fmt.Sprintf("b%d", i), cfg, opts...)
		if err != nil {
			return nil, err
		}
		bs = append(bs, b)
	}
	return bs, nil
}

func killAll(bs []*backendSrv) {
	for _, b := range bs {
		b.kill()
	}
}

// withProxy starts simulators and the proxy, runs fn, and stops everything.
func withProxy(ctx context.Context, k proxyKind, dir string, n int, sim fakevllm.Config, simOpts []fakevllm.Option,
	fn func(p *proc, port int, bs []*backendSrv) error) error {
	bs, err := startBackends(n, sim, simOpts...)
	defer killAll(bs)
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	p, err := k.start(ctx, dir, port, bs[:min(n, 3)])
	defer p.stop()
	if err != nil {
		return err
	}
	return fn(p, port, bs)
}

func steady(ctx context.Context, k proxyKind, dir string, tab *table) error {
	return withProxy(ctx, k, dir, 3, simConfig, nil, func(p *proc, _ int, _ []*backendSrv) error {
		res := agentLoad{target: "http://" + p.addr, sessions: 30, turns: 12, conc: 6, promptBytes: 3000}.run(ctx, "steady")
		sum := summarize(res, 0, -1)
		tab.set(k.name, "steady: warm turns (turns 2..12)", pct(sum.warmRate), true)
		tab.set(k.name, "steady: p99 latency", ms(sum.p99), false)
		tab.set(k.name, "steady: client errors", count(sum.errors), false)
		return nil
	})
}

func failover(ctx context.Context, k proxyKind, dir string, tab *table) error {
	const sessions, turns = 30, 15
	return withProxy(ctx, k, dir, 3, simConfig, nil, func(p *proc, _ int, bs []*backendSrv) error {
		victim := bs[1]
		restartedAfter := 9
		l := agentLoad{target: "http://" + p.addr, sessions: sessions, turns: turns, conc: 6, promptBytes: 3000,
			atDone: sessions*5 + sessions/2, atDoneFn: victim.kill}
		var rerr error
		l.betweenRounds = func(round int) {
			if round == restartedAfter {
				rerr = victim.restart()
				time.Sleep(3 * time.Second) // health checks see it back (rise 2 x 1 s)
			}
		}
		res := l.run(ctx, "failover")
		if rerr != nil {
			return rerr
		}
		sum := summarize(res, 0, -1)
		after := summarize(res, restartedAfter+1, -1)
		if *showSlow {
			var all []turnResult
			for s := range res {
				all = append(all, res[s][restartedAfter+1:]...)
			}
			slices.SortFunc(all, func(a, b turnResult) int { return int(b.lat - a.lat) })
			for _, r := range all[:5] {
				fmt.Fprintf(os.Stderr, "  %s slow: s%d t%d %s cached=%d %v\n", k.name, r.session, r.turn, r.backend, r.cached, r.lat)
			}
		}
		affected, cold, movedBack := 0, 0, 0
		for s := range res {
			if res[s][4].backend != victim.id {
				continue
			}
			affected++
			left := false
			for t := 5; t < turns; t++ {
				r := res[s][t]
				if r.ok && r.cached == 0 {
					cold++
				}
				if r.ok && r.backend != victim.id {
					left = true
				}
				if left && r.backend == victim.id {
					movedBack++
					break
				}
			}
		}
		tab.set(k.name, "failover: client errors", count(sum.errors), false)
		tab.set(k.name, "failover: sessions on the killed backend (placement, not compared)", placed(affected), true)
		tab.set(k.name, "failover: cold turns per affected session", ratioCell(float64(cold), float64(affected)), false)
		tab.set(k.name, "failover: sessions moved back after restart", count(movedBack), false)
		tab.set(k.name, "failover: p99 latency (whole run)", ms(sum.p99), false)
		tab.set(k.name, "failover: p99 latency after recovery", ms(after.p99), false)
		return nil
	})
}

func scaleOut(ctx context.Context, k proxyKind, dir string, tab *table) error {
	const reloadAfter = 4
	return withProxy(ctx, k, dir, 4, simConfig, nil, func(p *proc, port int, bs []*backendSrv) error {
		var rerr error
		l := agentLoad{target: "http://" + p.addr, sessions: 30, turns: 10, conc: 6, promptBytes: 3000}
		l.betweenRounds = func(round int) {
			if round == reloadAfter {
				if rerr = k.rewrite(p, port, bs); rerr == nil {
					rerr = p.reload()
				}
				time.Sleep(2 * time.Second)
			}
		}
		res := l.run(ctx, "scaleout")
		if rerr != nil {
			return rerr
		}
		sum := summarize(res, 0, -1)
		moved, onNew := 0, 0
		for s := range res {
			for t := reloadAfter + 1; t < len(res[s]); t++ {
				if res[s][t].ok && res[s][t-1].ok && res[s][t].backend != res[s][t-1].backend {
					moved++
					break
				}
			}
			if res[s][len(res[s])-1].backend == bs[3].id {
				onNew++
			}
		}
		after := summarize(res, reloadAfter+1, -1)
		tab.set(k.name, "scale-out: client errors", count(sum.errors), false)
		tab.set(k.name, "scale-out: live sessions moved (of 30)", count(moved), false)
		tab.set(k.name, "scale-out: cold turns after the reload", count(after.cold), false)
		_ = onNew
		return nil
	})
}

// overheadSamples collects the overhead runs of one proxy.
type overheadSamples struct {
	rps   []float64
	cpu   []time.Duration // per request
	added []time.Duration // p50 through the proxy minus p50 direct, c=1
	// c=1, per proxied request: context switches and CPU time of the proxy's threads
	// (the mechanism behind added latency, and steadier than it on a busy machine)
	c1Switches []float64
	c1CPU      []time.Duration
	failed     int
}

func (o *overheadSamples) report(name string, tab *table) {
	tab.set(name, "overhead: req/s at c=32 (median of runs)", num(median(o.rps)), true)
	tab.set(name, "overhead: proxy CPU per request (median)", us(median(o.cpu)), false)
	tab.set(name, "overhead: added latency p50 at c=1 (median)", us(median(o.added)), false)
	tab.set(name, "overhead: proxy context switches per request at c=1 (median)", dec(median(o.c1Switches)), false)
	tab.set(name, "overhead: proxy CPU per request at c=1 (median)", us(median(o.c1CPU)), false)
	tab.set(name, "overhead: client errors", count(o.failed), false)
}

func median[T int64 | float64 | time.Duration](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// c1Blocks is how many alternating blocks the 2,000 direct and 2,000 proxied requests
// at concurrency 1 are sent in.
const c1Blocks = 10

func overhead(ctx context.Context, k proxyKind, dir string, o *overheadSamples, n int) error {
	noSleep := fakevllm.WithSleep(func(ctx context.Context, _ time.Duration) error { return ctx.Err() })
	return withProxy(ctx, k, dir, 3, fakevllm.Config{MaxConcurrent: 64, DefaultMaxTokens: 1}, []fakevllm.Option{noSleep},
		func(p *proc, _ int, bs []*backendSrv) error {
			target := "http://" + p.addr
			overheadLoad(ctx, target, 32, 2000, 1000) // warm-up: connections, caches
			c0, err := p.cpuTicks()
			if err != nil {
				return err
			}
			wall, _, failed := overheadLoad(ctx, target, 32, n, 1000)
			c1, err := p.cpuTicks()
			if err != nil {
				return err
			}
			cpu := time.Duration(c1-c0) * time.Second / clockTicks
			// c=1: direct and proxied alternate in blocks, so that load drifting on the
			// machine over the seconds of the run shifts both alike.
			var direct, proxied []time.Duration
			sw0, cpu0 := p.threadCounters()
			for range c1Blocks {
				_, d, _ := overheadLoad(ctx, bs[0].url(), 1, 2000/c1Blocks, 1000)
				_, px, _ := overheadLoad(ctx, target, 1, 2000/c1Blocks, 1000)
				direct, proxied = append(direct, d...), append(proxied, px...)
			}
			sw1, cpu1 := p.threadCounters()
			o.rps = append(o.rps, float64(n)/wall.Seconds())
			o.cpu = append(o.cpu, cpu/time.Duration(n))
			o.added = append(o.added, percentile(proxied, 50)-percentile(direct, 50))
			o.c1Switches = append(o.c1Switches, float64(sw1-sw0)/float64(len(proxied)))
			o.c1CPU = append(o.c1CPU, (cpu1-cpu0)/time.Duration(len(proxied)))
			o.failed += failed
			return nil
		})
}
