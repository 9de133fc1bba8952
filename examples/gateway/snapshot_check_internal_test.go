package gateway

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCheckSnapshotPathUnreadable: an existing non-empty file that cannot be read is
// left to the load at start (noLoad false: the load keeps it aside), but refused where
// nothing loads it (noLoad true: a reload naming a new path), since it would be replaced
// at shutdown. head stands in for the read: a root test process can read any file.
func TestCheckSnapshotPathUnreadable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "precious.txt")
	require.NoError(t, os.WriteFile(path, []byte("precious text"), 0o200))
	denied := func(string) (string, error) { return "", fs.ErrPermission }
	readable := func(string) (string, error) { return "SAFSNAP", nil }
	tests := []struct {
		name   string
		noLoad bool
		head   func(string) (string, error)
		ok     bool
	}{
		{"start, unreadable: left to the load", false, denied, true},
		{"reload to a new path, unreadable: refused", true, denied, false},
		{"reload to a new path, a snapshot: accepted", true, readable, true},
		{"start, a foreign file: refused", false, snapshotHead, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkSnapshotPath(path, tt.noLoad, tt.head)
			if tt.ok {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrBindingSnapshot), "%v", err)
			require.ErrorContains(t, err, "binding_snapshot")
		})
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "precious text", string(got), "never touched")
}
