package main

import (
	"bytes"
	"encoding/csv"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func TestRunOutputs(t *testing.T) {
	trace := writeTemp(t, handTrace+handTraceR7)
	dir := t.TempDir()
	csvPath, pngPath := filepath.Join(dir, "out.csv"), filepath.Join(dir, "out.png")
	var stdout, stderr bytes.Buffer
	err := run([]string{"-trace", trace, "-backends", "2", "-csv", csvPath, "-plot", pngPath,
		"-down", "0:2500ms-4500ms"}, &stdout, &stderr)
	require.NoError(t, err, stderr.String())
	out := stdout.String()
	for _, want := range []string{
		"8 requests", "15 distinct blocks",
		"sessions: 3, continuing turns: 5 (62.5 %), longest session: 4 turns",
		"| 1 | 1 | 1 |", "| 3 | 1 | 3 |", "| 4 | 1 | 4 |",
		"N = 2 backends, cache 1 blocks/backend", "outages: 0:2500ms-4500ms",
		"| policy | prefix hit | vs cache-aware |",
		"| cache-aware |", "| scheduler |", "| hrw |", "| random |", "| round-robin |", "| least-loaded | ",
		"scheduler: 3 affinity hits, 5 misses",
	} {
		assert.Contains(t, out, want)
	}
	assert.Empty(t, stderr.String(), "no progress bar when stderr is not a terminal")

	f, err := os.Open(csvPath)
	require.NoError(t, err)
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	require.Len(t, recs, 1+len(PolicyNames))
	assert.Equal(t, "policy", recs[0][0])
	for i, name := range PolicyNames {
		assert.Equal(t, name, recs[i+1][0])
		assert.Equal(t, "2", recs[i+1][1])
	}
	// least-loaded's p99 ratio to itself is 1.
	assert.Equal(t, "1.000000", recs[3][10])

	png, err := os.ReadFile(pngPath)
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(png, []byte("\x89PNG")), "PNG signature")
}

// When the default cache (20 % of the distinct blocks over N, in whole blocks, at least
// one) cannot hold 20 %, the output says what it holds and why instead of printing a
// share that contradicts the default silently; an explicit -cache-blocks gets no note.
func TestRunCacheShareNote(t *testing.T) {
	trace := writeTemp(t, handTrace+handTraceR7) // 15 distinct blocks
	tests := []struct {
		args []string
		want string // "" = no note
	}{
		{[]string{"-backends", "100"}, "note: 20 % of the trace's 15 distinct blocks over 100 backends is 0.03 blocks each; " +
			"every cache holds at least 1 block, so the caches hold 666.7 % of distinct blocks in total, not 20 % (pass -cache-blocks or fewer -backends)"},
		{[]string{"-backends", "2"}, "note: 20 % of the trace's 15 distinct blocks over 2 backends is 1.5 blocks each, " +
			"rounded down to 1: the caches hold 13.3 % of distinct blocks in total, not 20 %"},
		{[]string{"-backends", "3"}, ""}, // 1 block each: exactly 20 %
		{[]string{"-backends", "100", "-cache-blocks", "1"}, ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout bytes.Buffer
			args := append([]string{"-trace", trace, "-policies", "hrw", "-quiet"}, tt.args...)
			require.NoError(t, run(args, &stdout, &bytes.Buffer{}))
			if tt.want == "" {
				assert.NotContains(t, stdout.String(), "note:")
				return
			}
			assert.Contains(t, stdout.String(), "\n"+tt.want+"\n")
		})
	}
}

func TestRunPolicySubset(t *testing.T) {
	trace := writeTemp(t, handTrace)
	var stdout bytes.Buffer
	require.NoError(t, run([]string{"-trace", trace, "-backends", "2", "-cache-blocks", "100", "-policies", "hrw, round-robin", "-quiet"}, &stdout, &bytes.Buffer{}))
	out := stdout.String()
	assert.Contains(t, out, "cache 100 blocks/backend")
	// Without the references the ratio columns are empty.
	assert.Contains(t, out, "| hrw | 55.7 % | – | 100.0 % |")
	assert.NotContains(t, out, "| scheduler |")
}

func TestRunMalformedLines(t *testing.T) {
	trace := writeTemp(t, handTrace+"{oops\n")
	var stdout, stderr bytes.Buffer
	require.NoError(t, run([]string{"-trace", trace, "-backends", "2", "-policies", "hrw"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "skipped line 8:")

	stderr.Reset()
	err := run([]string{"-trace", trace, "-strict"}, &bytes.Buffer{}, &stderr)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "1 malformed line(s)")
}

func TestErrorLineSaysProgramOnce(t *testing.T) {
	trace := writeTemp(t, handTrace)
	err := run([]string{"-trace", trace, "-down", "x"}, &bytes.Buffer{}, &bytes.Buffer{})
	require.ErrorIs(t, err, ErrBadEvent)
	assert.Equal(t, `tracereplay: bad backend event: "x": want INDEX:DOWN-UP`, errorLine(err))
	err = run([]string{"-trace", trace, "-backends", "0"}, &bytes.Buffer{}, &bytes.Buffer{})
	require.Error(t, err)
	assert.Equal(t, "tracereplay: -backends 0: want >= 1", errorLine(err))
}

func TestRunErrors(t *testing.T) {
	trace := writeTemp(t, handTrace)
	tests := []struct {
		name string
		args []string
		err  error
		msg  string
	}{
		{"help", []string{"-h"}, flag.ErrHelp, ""},
		{"backends", []string{"-trace", trace, "-backends", "0"}, nil, "-backends 0"},
		{"cache", []string{"-trace", trace, "-cache-blocks", "-1"}, nil, "-cache-blocks -1"},
		{"ttl", []string{"-trace", trace, "-ttl", "-1s"}, nil, "-ttl"},
		{"arg", []string{"-trace", trace, "extra"}, nil, "unexpected argument"},
		{"down", []string{"-trace", trace, "-down", "9:1s-2s"}, ErrBadEvent, ""},
		{"policy", []string{"-trace", trace, "-policies", "nope"}, ErrUnknownPolicy, ""},
		{"no policy", []string{"-trace", trace, "-policies", ""}, nil, `-policies "": names no policy; want a comma-separated list of random, round-robin`},
		{"only commas", []string{"-trace", trace, "-policies", " , "}, nil, `-policies " , ": names no policy`},
		{"missing", []string{"-trace", filepath.Join(t.TempDir(), "none.jsonl")}, os.ErrNotExist, ""},
		{"empty", []string{"-trace", writeTemp(t, "\n")}, ErrEmptyTrace, ""},
		{"all down", []string{"-trace", trace, "-backends", "1", "-down", "0:0s-"}, ErrNoBackendUp, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(tt.args, &bytes.Buffer{}, &bytes.Buffer{})
			require.Error(t, err)
			if tt.err != nil {
				assert.True(t, errors.Is(err, tt.err), "got %v, want %v", err, tt.err)
			}
			assert.True(t, strings.Contains(err.Error(), tt.msg), "got %v", err)
		})
	}
}
