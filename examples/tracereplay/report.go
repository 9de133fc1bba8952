package main

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Row is one policy's line of the report, with the ratios to the reference policies
// resolved (NaN when the reference was not run).
type Row struct {
	Backends, CacheBlocks int
	*Result
	VsCacheAware  float64 // HitRatio / cache-aware's HitRatio
	P99VsLeastLd  float64 // P99 / least-loaded's P99
	P50, P99      time.Duration
	AffinityShare float64
}

// Rows resolves the reference ratios over one set of results (same trace and cluster).
func Rows(results []*Result, backends, cacheBlocks int) []Row {
	var ref, ll *Result
	for _, r := range results {
		switch r.Policy {
		case "cache-aware":
			ref = r
		case "least-loaded":
			ll = r
		}
	}
	rows := make([]Row, len(results))
	for i, r := range results {
		row := Row{Backends: backends, CacheBlocks: cacheBlocks, Result: r,
			P50: r.Percentile(0.50), P99: r.Percentile(0.99),
			AffinityShare: r.AffinityRate(), VsCacheAware: math.NaN(), P99VsLeastLd: math.NaN()}
		if ref != nil && ref.HitRatio() > 0 {
			row.VsCacheAware = r.HitRatio() / ref.HitRatio()
		}
		if ll != nil && ll.Percentile(0.99) > 0 {
			row.P99VsLeastLd = float64(row.P99) / float64(ll.Percentile(0.99))
		}
		rows[i] = row
	}
	return rows
}

func pct(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.1f %%", 100*x)
}

func ratio(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.2fx", x)
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// WriteMarkdown writes the results table.
func WriteMarkdown(w io.Writer, rows []Row) error {
	_, err := fmt.Fprintln(w, "| policy | prefix hit | vs cache-aware | affinity hit | work max/mean | p50 | p99 | p99 vs least-loaded |\n"+
		"|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "| %s | %s | %s | %s | %.2f | %s | %s | %s |\n", r.Policy,
			pct(r.HitRatio()), pct(r.VsCacheAware), pct(r.AffinityShare), r.WorkImbalance(),
			secs(r.P50), secs(r.P99), ratio(r.P99VsLeastLd))
	}
	return err
}

// WriteCSV writes one header line and one line per row (ratios as fractions, times in
// seconds, empty for a missing reference).
func WriteCSV(w io.Writer, rows []Row) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"policy", "backends", "cache_blocks", "requests", "prefix_hit_ratio",
		"vs_cache_aware", "affinity_hit_rate", "work_max_over_mean", "p50_s", "p99_s", "p99_vs_least_loaded"})
	f := func(x float64) string {
		if math.IsNaN(x) {
			return ""
		}
		return strconv.FormatFloat(x, 'f', 6, 64)
	}
	for _, r := range rows {
		_ = cw.Write([]string{r.Policy, strconv.Itoa(r.Backends), strconv.Itoa(r.CacheBlocks),
			strconv.Itoa(r.Requests), f(r.HitRatio()), f(r.VsCacheAware), f(r.AffinityShare),
			f(r.WorkImbalance()), f(r.P50.Seconds()), f(r.P99.Seconds()), f(r.P99VsLeastLd)})
	}
	cw.Flush()
	return cw.Error()
}

// SavePlot writes a PNG (or any format gonum/plot infers from the file name) of prefix
// hit ratio against p99 latency, one labelled point per policy.
func SavePlot(path, title string, rows []Row) error {
	p := plot.New()
	p.Title.Text = title
	p.Title.Padding = vg.Points(6)
	p.X.Label.Text = "p99 simulated latency (s)"
	p.Y.Label.Text = "prefix hit ratio (%)"
	// Policies whose points (nearly) coincide — hrw and scheduler without outages — share
	// one point and one label.
	var xys plotter.XYs
	var labels []string
	maxX := 0.0
	for _, r := range rows {
		maxX = max(maxX, r.P99.Seconds())
	}
	for _, r := range rows {
		x, y := r.P99.Seconds(), 100*r.HitRatio()
		merged := false
		for i := range xys {
			if math.Abs(xys[i].X-x) <= 0.01*maxX && math.Abs(xys[i].Y-y) <= 0.5 {
				labels[i] += ", " + r.Policy
				merged = true
				break
			}
		}
		if !merged {
			xys = append(xys, plotter.XY{X: x, Y: y})
			labels = append(labels, " "+r.Policy)
		}
	}
	sc, err := plotter.NewScatter(xys)
	if err != nil {
		return fmt.Errorf("tracereplay: plot: %w", err)
	}
	sc.GlyphStyle.Shape = draw.CircleGlyph{}
	sc.GlyphStyle.Radius = vg.Points(4)
	sc.GlyphStyle.Color = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	lb, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
	if err != nil {
		return fmt.Errorf("tracereplay: plot: %w", err)
	}
	p.Add(sc, lb, plotter.NewGrid())
	// Room for the labels right of the points.
	p.X.Min = 0
	p.X.Max *= 1.35
	p.Y.Min = 0
	p.Y.Max = max(p.Y.Max*1.1, 1)
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("tracereplay: plot: %w", err)
	}
	return nil
}
