package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/agentserve/sessionaffinity/affinity"
)

// defaultTrace is the Mooncake conversation trace relative to examples/ (the directory
// `go run -C examples ./tracereplay` runs in).
const defaultTrace = "../../shared/traces/mooncake_conversation_trace.jsonl"

// defaultCacheShare sizes the per-backend cache: 20 % of the trace's distinct blocks,
// split over the backends (so the total cache is the same whatever N).
const defaultCacheShare = 0.20

// cacheShareNote says, when the default cache size (defaultCacheShare of distinct blocks
// over backends, in whole blocks, at least 1) does not come out at that share as printed
// (one decimal), what the share is and why: rounded down to whole blocks, or raised to
// the minimum of one block per backend when there are more backends than blocks to share.
// "" when the share is as asked. cacheBlocks is the size used.
func cacheShareNote(distinct, backends, cacheBlocks int) string {
	if distinct <= 0 || backends <= 0 {
		return ""
	}
	want := 100 * defaultCacheShare
	got := 100 * float64(cacheBlocks) * float64(backends) / float64(distinct)
	if fmt.Sprintf("%.1f", got) == fmt.Sprintf("%.1f", want) {
		return ""
	}
	each := defaultCacheShare * float64(distinct) / float64(backends)
	if each < 1 {
		return fmt.Sprintf("%g %% of the trace's %d distinct blocks over %d backends is %.3g blocks each; "+
			"every cache holds at least 1 block, so the caches hold %.1f %% of distinct blocks in total, not %g %% "+
			"(pass -cache-blocks or fewer -backends)", want, distinct, backends, each, got, want)
	}
	return fmt.Sprintf("%g %% of the trace's %d distinct blocks over %d backends is %.3g blocks each, "+
		"rounded down to %d: the caches hold %.1f %% of distinct blocks in total, not %g %%",
		want, distinct, backends, each, cacheBlocks, got, want)
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, errorLine(err))
		}
		os.Exit(2)
	}
}

// errorLine is the line main prints for err: "tracereplay: " once, also when err is one
// of this package's sentinels (ErrBadEvent, ...), which carry that prefix themselves.
func errorLine(err error) string {
	return "tracereplay: " + strings.TrimPrefix(err.Error(), "tracereplay: ")
}

type options struct {
	trace       string
	backends    int
	cacheBlocks int
	policies    string
	names       []string // policies, split and trimmed: at least one
	seed        uint64
	ttl         time.Duration
	down        string
	csv, plot   string
	quiet       bool
	strict      bool
	factor      float64
	weight      float64
	cold        float64
	drain       float64
	drainEWMA   float64
	guard       float64
	sweep       string
	minCost     int64
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("tracereplay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.trace, "trace", defaultTrace, "Mooncake-format JSONL trace")
	fs.IntVar(&o.backends, "backends", 8, "number of simulated backends N")
	fs.IntVar(&o.cacheBlocks, "cache-blocks", 0, "prefix-cache capacity per backend in 512-token blocks (0: 20 % of the trace's distinct blocks / N)")
	fs.StringVar(&o.policies, "policies", strings.Join(PolicyNames, ","), "comma-separated policies to replay")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the random policy")
	fs.DurationVar(&o.ttl, "ttl", 30*time.Minute, "Scheduler sticky TTL in trace time (whole seconds; 0 disables affinity)")
	fs.StringVar(&o.down, "down", "", `backend outages in trace time, e.g. "2:600s-900s,5:20m-" (INDEX:DOWN-UP; empty UP: stays down)`)
	fs.StringVar(&o.csv, "csv", "", "also write the results as CSV to this file")
	fs.StringVar(&o.plot, "plot", "", "also write a PNG chart (hit ratio vs p99 per policy) to this file")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress bar")
	fs.BoolVar(&o.strict, "strict", false, "fail on any malformed trace line (default: report and skip them)")
	fs.Float64Var(&o.factor, "balance-factor", DefaultBalanceFactor, "load-aware policy: load.balance_factor (>= 1)")
	fs.Float64Var(&o.weight, "spill-cost-weight", DefaultSpillCostWeight, "load-aware policy: load.spill_cost_weight (>= 0)")
	fs.Float64Var(&o.cold, "cold-cache-ratio", DefaultColdCacheRatio, "load-aware policy: load.cold_cache_ratio (0: the library default 0.05)")
	fs.Float64Var(&o.drain, "drain-rate", DefaultDrainRate, "load-aware policy: load.drain_tokens_per_second (0: the drain model off)")
	fs.Float64Var(&o.drainEWMA, "drain-ewma", 0, "load-aware policy: load.drain_ewma_weight (0: the library default)")
	fs.Float64Var(&o.guard, "retention-guard", DefaultRetentionGuard, "load-aware policy: load.retention_guard_factor (0: off; needs -drain-rate)")
	fs.Int64Var(&o.minCost, "min-request-cost", DefaultMinRequestCost, "load-aware policy: load.min_request_cost (0: off)")
	fs.StringVar(&o.sweep, "sweep", "", `also replay the load-aware policy over a grid "FACTORS x WEIGHTS", e.g. "1.1,1.25,1.5,2 x 0,0.5,1,2"`)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: tracereplay [flags]\n\nReplays a request trace through routing policies over simulated backends.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.backends < 1 {
		return nil, fmt.Errorf("-backends %d: want >= 1", o.backends)
	}
	if o.cacheBlocks < 0 {
		return nil, fmt.Errorf("-cache-blocks %d: want >= 0", o.cacheBlocks)
	}
	if o.ttl < 0 {
		return nil, fmt.Errorf("-ttl %v: want >= 0", o.ttl)
	}
	for n := range strings.SplitSeq(o.policies, ",") {
		if n = strings.TrimSpace(n); n != "" {
			o.names = append(o.names, n)
		}
	}
	if len(o.names) == 0 {
		return nil, fmt.Errorf("-policies %q: names no policy; want a comma-separated list of %s", o.policies, strings.Join(PolicyNames, ", "))
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	events, err := ParseEvents(o.down, o.backends)
	if err != nil {
		return err
	}
	f, err := os.Open(o.trace)
	if err != nil {
		return missingTrace(o.trace, err)
	}
	tr, err := ReadTrace(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", o.trace, err)
	}
	if len(tr.Skipped) > 0 {
		for i, e := range tr.Skipped {
			if i == 10 {
				fmt.Fprintf(stderr, "… and %d more\n", len(tr.Skipped)-10)
				break
			}
			fmt.Fprintf(stderr, "%s: skipped %v\n", filepath.Base(o.trace), e)
		}
		if o.strict {
			return fmt.Errorf("%s: %d malformed line(s) (-strict)", o.trace, len(tr.Skipped))
		}
	}
	reqs := tr.Requests
	facts := ComputeFacts(reqs)
	global := GlobalPrefix(reqs)
	sess := ReconstructSessions(reqs, global)
	ids := SessionIDs(sess)
	cacheBlocks := o.cacheBlocks
	if cacheBlocks == 0 {
		cacheBlocks = max(1, int(defaultCacheShare*float64(facts.DistinctBlocks)/float64(o.backends)))
	}

	cfgP := PolicyConfig{Backends: o.backends, Seed: o.seed, TTL: o.ttl, Global: global,
		Load: affinity.LoadConfig{BalanceFactor: o.factor, SpillCostWeight: affinity.SpillWeight(o.weight), ColdCacheRatio: o.cold,
			DrainTokensPerSecond: o.drain, DrainEWMAWeight: o.drainEWMA,
			RetentionGuardFactor: o.guard, MinRequestCost: o.minCost}}
	if err := cfgP.Load.Validate(); err != nil {
		return err
	}
	grid, err := ParseSweep(o.sweep)
	if err != nil {
		return err
	}
	policies := make([]Policy, 0, len(o.names))
	for _, n := range o.names {
		p, err := NewPolicy(n, cfgP)
		if err != nil {
			return err
		}
		policies = append(policies, p)
	}

	writeHeader(stdout, filepath.Base(o.trace), facts, global, sess)
	fmt.Fprintf(stdout, "\nN = %d backends, cache %d blocks/backend (%.1f %% of distinct blocks in total), Scheduler TTL %v (trace time), model: %s",
		o.backends, cacheBlocks, 100*float64(cacheBlocks*o.backends)/float64(max(facts.DistinctBlocks, 1)), o.ttl, describeModel(DefaultModel))
	if len(events) > 0 {
		fmt.Fprintf(stdout, ", outages: %s", o.down)
	}
	if o.cacheBlocks == 0 {
		if note := cacheShareNote(facts.DistinctBlocks, o.backends, cacheBlocks); note != "" {
			fmt.Fprintf(stdout, "\nnote: %s", note)
		}
	}
	fmt.Fprint(stdout, "\n\n")

	bar := progressbar.NewOptions(len(reqs)*len(policies),
		progressbar.OptionSetWriter(stderr),
		progressbar.OptionSetVisibility(!o.quiet && isTerminal(stderr)),
		progressbar.OptionSetDescription("replaying"),
		progressbar.OptionShowCount(),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish())
	cfgR := ReplayConfig{Backends: o.backends, CacheBlocks: cacheBlocks, Model: DefaultModel, Events: events}
	results := make([]*Result, 0, len(policies))
	for k, p := range policies {
		base := k * len(reqs)
		bar.Describe("replaying " + p.Name())
		res, err := Replay(reqs, sess, ids, p, cfgR, func(done int) { _ = bar.Set(base + done) })
		if err != nil {
			return err
		}
		results = append(results, res)
	}
	_ = bar.Finish()

	rows := Rows(results, o.backends, cacheBlocks)
	if err := WriteMarkdown(stdout, rows); err != nil {
		return err
	}
	if len(grid) > 0 {
		if err := runSweep(stdout, grid, reqs, sess, ids, cfgP, cfgR, results); err != nil {
			return err
		}
	}
	for _, r := range rows {
		if r.ReportsHit {
			fmt.Fprintf(stdout, "\n%s: %d affinity hits, %d misses (hits / all requests = %.1f %%).\n",
				r.Policy, r.Hits, r.Misses, 100*float64(r.Hits)/float64(max(r.Hits+r.Misses, 1)))
		}
	}
	if o.csv != "" {
		if err := writeFile(o.csv, func(w io.Writer) error { return WriteCSV(w, rows) }); err != nil {
			return err
		}
	}
	if o.plot != "" {
		title := fmt.Sprintf("%s, N = %d, %d blocks/backend", filepath.Base(o.trace), o.backends, cacheBlocks)
		if err := SavePlot(o.plot, title, rows); err != nil {
			return err
		}
	}
	return nil
}

func writeHeader(w io.Writer, name string, f Facts, global []int64, s *Sessions) {
	fmt.Fprintf(w, "trace %s: %d requests over %.1f min, %d distinct blocks, %.1fM input / %.1fM output tokens\n",
		name, f.Requests, float64(f.Duration)/60000, f.DistinctBlocks, float64(f.InputTokens)/1e6, float64(f.OutputTokens)/1e6)
	fmt.Fprintf(w, "ideal prefix hit ratio (one infinite cache): %.2f %%\n", 100*f.IdealHitRatio)
	fmt.Fprintf(w, "global prefix: %d block(s); sessions: %d, continuing turns: %d (%.1f %%), longest session: %d turns\n\n",
		len(global), s.Count, s.Continuing, 100*float64(s.Continuing)/float64(max(f.Requests, 1)), s.MaxTurns())
	fmt.Fprintln(w, "| turns/session | sessions | requests |\n|---:|---:|---:|")
	for _, b := range s.TurnsHistogram() {
		fmt.Fprintf(w, "| %s | %d | %d |\n", b.Label, b.Sessions, b.Turns)
	}
}

func describeModel(m ServiceModel) string {
	return fmt.Sprintf("FIFO, service = %v + %v/uncached prompt token + %v/output token",
		m.Overhead, m.PrefillPerToken, m.DecodePerToken)
}

// isTerminal reports whether w is a terminal (golang.org/x/term): not a file, a pipe or
// /dev/null, so the progress bar never lands in logs or CI output.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// writeFile creates path (and its missing parent directories, e.g. out/) and fills it.
func writeFile(path string, fn func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
