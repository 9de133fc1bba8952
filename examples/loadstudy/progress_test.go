package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Progress bars go to a terminal only: a file, a pipe or /dev/null (which is a character
// device, yet no terminal) gets none, and neither does -quiet.
func TestProgressOnlyOnATerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr.log"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	r, w, err := os.Pipe()
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close(); _ = w.Close() })
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = devnull.Close() })

	for name, out := range map[string]*os.File{"file": f, "pipe": w, "/dev/null": devnull, "nil": nil} {
		assert.Nil(t, progressTo(out, false), name)
		assert.Nil(t, progressTo(out, true), name+" quiet")
	}
}
