package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The progress bar is shown on a terminal only; /dev/null is a character device but not
// a terminal, so redirecting stderr there (or to a file, a pipe, a buffer) shows none.
func TestIsTerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr.log"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = devnull.Close() })
	r, w, err := os.Pipe()
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close(); _ = w.Close() })

	assert.False(t, isTerminal(f), "file")
	assert.False(t, isTerminal(devnull), "/dev/null")
	assert.False(t, isTerminal(w), "pipe")
	assert.False(t, isTerminal(&bytes.Buffer{}), "buffer")
}

// Without the trace, tracereplay says where it comes from and how to get it.
func TestMissingTraceSaysHowToGetIt(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-trace.jsonl")
	err := run([]string{"-trace", missing, "-quiet"}, &bytes.Buffer{}, &bytes.Buffer{})
	require.Error(t, err)
	assert.ErrorIs(t, err, os.ErrNotExist)
	for _, want := range []string{"make trace", traceURL, traceSHA256, traceCommit, "kvcache-ai/Mooncake", missing} {
		assert.Contains(t, err.Error(), want)
	}
	// Other open errors are not dressed up as a missing trace.
	err = run([]string{"-trace", t.TempDir(), "-quiet"}, &bytes.Buffer{}, &bytes.Buffer{})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "make trace")
}

// -csv and -plot create missing parent directories (the README writes to out/, which
// .gitignore covers).
func TestOutputsCreateParentDirectories(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "trace.jsonl")
	require.NoError(t, os.WriteFile(trace, []byte(
		`{"timestamp": 0, "input_length": 600, "output_length": 10, "hash_ids": [0, 1]}`+"\n"+
			`{"timestamp": 1000, "input_length": 1200, "output_length": 10, "hash_ids": [0, 1, 2]}`+"\n"), 0o644))
	dir := filepath.Join(t.TempDir(), "out", "nested")
	csv, png := filepath.Join(dir, "r.csv"), filepath.Join(dir, "r.png")
	require.NoError(t, run([]string{"-trace", trace, "-backends", "2", "-csv", csv, "-plot", png, "-quiet"}, &bytes.Buffer{}, &bytes.Buffer{}))
	for _, f := range []string{csv, png} {
		fi, err := os.Stat(f)
		require.NoError(t, err)
		assert.Positive(t, fi.Size(), f)
	}
}
