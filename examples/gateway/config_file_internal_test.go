package gateway

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readConfigFile reads a file of exactly MaxConfigBytes whole, and returns the FileInfo
// of the file it read (WatchConfig compares it with what it sees).
func TestReadConfigFileAtTheCap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "at-cap.yaml")
	require.NoError(t, os.WriteFile(path, []byte("#"), 0o600))
	require.NoError(t, os.Truncate(path, MaxConfigBytes)) // sparse: nothing written
	data, fi, err := readConfigFile(path)
	require.NoError(t, err)
	assert.Equal(t, MaxConfigBytes, len(data))
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.True(t, sameConfigFile(st, fi))
}
