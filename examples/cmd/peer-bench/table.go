package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

type summary struct {
	errors   int
	cold     int // successful turns after the first with nothing cached
	warmRate float64
	p99      time.Duration
}

// summarize covers turns [from, to) of every session (to < 0: through the last).
func summarize(res [][]turnResult, from, to int) summary {
	var s summary
	var lats []time.Duration
	warm, later := 0, 0
	for _, turns := range res {
		end := to
		if end < 0 {
			end = len(turns)
		}
		for _, r := range turns[from:end] {
			if !r.ok {
				s.errors++
				continue
			}
			lats = append(lats, r.lat)
			if r.turn == 0 {
				continue
			}
			later++
			if r.cached > 0 {
				warm++
			} else {
				s.cold++
			}
		}
	}
	if later > 0 {
		s.warmRate = float64(warm) / float64(later)
	}
	s.p99 = percentile(lats, 99)
	return s
}

// cell is one measurement: its value (for ratios) and how it prints.
type cell struct {
	v    float64
	text string
	// context marks a figure that describes the run rather than the proxy (how many
	// sessions consistent hashing happened to put on the killed backend): no ratio.
	context bool
}

// placed is a count that describes the run: printed, never compared.
func placed(n int) cell { return cell{v: float64(n), text: fmt.Sprint(n), context: true} }

func pct(f float64) cell { return cell{v: f, text: fmt.Sprintf("%.1f %%", 100*f)} }
func ms(d time.Duration) cell {
	return cell{v: float64(d), text: fmt.Sprintf("%.1f ms", float64(d)/1e6)}
}
func us(d time.Duration) cell {
	return cell{v: float64(d), text: fmt.Sprintf("%.0f µs", float64(d)/1e3)}
}
func count(n int) cell   { return cell{v: float64(n), text: fmt.Sprint(n)} }
func num(f float64) cell { return cell{v: f, text: fmt.Sprintf("%.0f", f)} }
func dec(f float64) cell { return cell{v: f, text: fmt.Sprintf("%.2f", f)} }
func ratioCell(a, b float64) cell {
	if b == 0 {
		return cell{v: 0, text: "-"}
	}
	return cell{v: a / b, text: fmt.Sprintf("%.2f", a/b)}
}

type table struct {
	cols []string
	rows []string
	data map[string]map[string]cell
}

func newTable(cols []string) *table {
	return &table{cols: cols, data: map[string]map[string]cell{}}
}

// set records a cell; higherBetter is unused by the ratio (always product / peer) and
// kept to document the row.
func (t *table) set(col, row string, c cell, _ bool) {
	if t.data[row] == nil {
		t.data[row] = map[string]cell{}
		t.rows = append(t.rows, row)
	}
	t.data[row][col] = c
}

// print writes a Markdown table: one column per proxy, then product/peer ratios.
func (t *table) print(w io.Writer) {
	head := append([]string{"metric"}, t.cols...)
	for _, peer := range t.cols[1:] {
		head = append(head, t.cols[0]+"/"+peer)
	}
	fmt.Fprintln(w, "| "+strings.Join(head, " | ")+" |")
	fmt.Fprintln(w, "|"+strings.Repeat("---|", len(head)))
	for _, row := range t.rows {
		line := []string{row}
		for _, c := range t.cols {
			if v, ok := t.data[row][c]; ok {
				line = append(line, v.text)
			} else {
				line = append(line, "")
			}
		}
		prod, ok := t.data[row][t.cols[0]]
		for _, peer := range t.cols[1:] {
			pv, pok := t.data[row][peer]
			switch {
			case !ok || !pok:
				line = append(line, "")
			case prod.context || pv.context:
				line = append(line, "n/a")
			case pv.v == 0 && prod.v == 0:
				line = append(line, "=")
			case pv.v == 0 || math.IsNaN(prod.v/pv.v):
				line = append(line, "-")
			default:
				line = append(line, fmt.Sprintf("%.2fx", prod.v/pv.v))
			}
		}
		fmt.Fprintln(w, "| "+strings.Join(line, " | ")+" |")
	}
}
