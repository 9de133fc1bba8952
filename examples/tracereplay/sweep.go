package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/agentserve/sessionaffinity/affinity"
)

// ErrBadSweep is returned by ParseSweep for a malformed -sweep grid.
var ErrBadSweep = errors.New("tracereplay: bad -sweep grid")

// SweepPoint is one (balance_factor, spill_cost_weight) of a sweep.
type SweepPoint struct{ Factor, Weight float64 }

// ParseSweep parses "F1,F2,... x W1,W2,..." into the grid of every pair (factors outer).
// "" gives no grid. Each point must be a valid load config.
func ParseSweep(spec string) ([]SweepPoint, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, nil
	}
	fs, ws, ok := strings.Cut(spec, "x")
	if !ok {
		return nil, fmt.Errorf("%w: %q: want FACTORS x WEIGHTS", ErrBadSweep, spec)
	}
	parse := func(list string) ([]float64, error) {
		var out []float64
		for f := range strings.SplitSeq(list, ",") {
			v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil {
				return nil, fmt.Errorf("%w: %q: %w", ErrBadSweep, f, err)
			}
			out = append(out, v)
		}
		return out, nil
	}
	factors, err := parse(fs)
	if err != nil {
		return nil, err
	}
	weights, err := parse(ws)
	if err != nil {
		return nil, err
	}
	var grid []SweepPoint
	for _, f := range factors {
		for _, w := range weights {
			if err := (affinity.LoadConfig{BalanceFactor: f, SpillCostWeight: affinity.SpillWeight(w)}).Validate(); err != nil || f == 0 {
				return nil, fmt.Errorf("%w: factor %v, weight %v: %w", ErrBadSweep, f, w, err)
			}
			grid = append(grid, SweepPoint{f, w})
		}
	}
	return grid, nil
}

// runSweep replays the load-aware policy at every grid point (the other load keys from pc) and writes one table: prefix
// hit vs the cache-aware reference and p99 vs least-loaded of base (the main run's
// results, same cluster), and whether the goal (>= 97 % and <= 1.0x) is met.
func runSweep(w io.Writer, grid []SweepPoint, reqs []Request, sess *Sessions, ids []string, pc PolicyConfig, rc ReplayConfig, base []*Result) error {
	fmt.Fprintf(w, "\nload-aware sweep (balance_factor x spill_cost_weight), N = %d, %d blocks/backend:\n\n", rc.Backends, rc.CacheBlocks)
	fmt.Fprintln(w, "| balance_factor | spill_cost_weight | prefix hit | vs cache-aware | affinity hit | spills | p50 | p99 | p99 vs least-loaded | goal |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, pt := range grid {
		load := pc.Load // the other keys as the main run's
		load.BalanceFactor, load.SpillCostWeight = pt.Factor, affinity.SpillWeight(pt.Weight)
		p, err := newLeasePolicy("load-aware", pc.Backends, pc.TTL, load)
		if err != nil {
			return err
		}
		res, err := Replay(reqs, sess, ids, p, rc, nil)
		if err != nil {
			return err
		}
		row := Rows(append(append([]*Result(nil), base...), res), rc.Backends, rc.CacheBlocks)
		r := row[len(row)-1]
		goal := "no"
		if r.VsCacheAware >= 0.97 && r.P99VsLeastLd <= 1.0 {
			goal = "yes"
		}
		fmt.Fprintf(w, "| %.2f | %.2f | %s | %s | %s | %d | %s | %s | %s | %s |\n", pt.Factor, pt.Weight,
			pct(r.HitRatio()), pct(r.VsCacheAware), pct(r.AffinityShare), p.spills, secs(r.P50), secs(r.P99), ratio(r.P99VsLeastLd), goal)
	}
	return nil
}
