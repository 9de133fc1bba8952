//go:build unix

package gateway_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// mkfifo makes a named pipe at path.
func mkfifo(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, syscall.Mkfifo(path, 0o600))
}

// loadWithin runs LoadConfig(path) and fails the test if it has not returned within a
// generous bound (a read blocked on a FIFO without a writer never returns; the test then
// opens the FIFO for writing, which ends the read, so no goroutine outlives it).
func loadWithin(t *testing.T, path string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := gateway.LoadConfig(path)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second): // a guard against a hang, not a wait: the pass returns at once
		if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
			_ = f.Close()
		}
		<-done
		t.Fatalf("LoadConfig(%s) blocked", path)
		return nil
	}
}

// A config path that is not a regular file once symlinks are followed — a FIFO, a
// device such as /dev/zero, a directory, a socket — is refused before it is read, with
// ErrConfigNotRegular naming what it is; not a configuration error. (Before: a FIFO
// blocked the read until something wrote to it, every later reload waiting behind it,
// and /dev/zero grew the process by gigabytes: tester32 #3.)
func TestLoadConfigRefusesNonRegularFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	mkfifo(t, fifo)
	viaLink := filepath.Join(dir, "link-to-fifo.yaml")
	require.NoError(t, os.Symlink(fifo, viaLink))
	tests := []struct {
		name, path, want string
	}{
		{"a FIFO", fifo, "a named pipe (FIFO), not a regular file"},
		{"a symlink to a FIFO", viaLink, "a named pipe (FIFO), not a regular file"},
		{"a directory", dir, "a directory, not a regular file"},
	}
	if _, err := os.Stat(os.DevNull); err == nil {
		zero := filepath.Join(dir, "zero.yaml")
		require.NoError(t, os.Symlink("/dev/zero", zero))
		tests = append(tests, struct{ name, path, want string }{"a symlink to /dev/zero", zero, "a device, not a regular file"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := loadWithin(t, tt.path)
			require.ErrorIs(t, err, gateway.ErrConfigNotRegular)
			assert.NotErrorIs(t, err, gateway.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tt.want)
			assert.Contains(t, err.Error(), tt.path)
		})
	}
}

// A config file over MaxConfigBytes is refused with ErrConfigTooLarge, which names the
// cap, without being parsed (config_file_internal_test.go: one of exactly MaxConfigBytes
// is read whole). (Before: no bound.)
func TestLoadConfigCapsTheSize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "over-cap.yaml")
	valid := []byte("listen: 127.0.0.1:0\nbackends:\n  - {id: b0, url: \"http://127.0.0.1:1\"}\n#")
	require.NoError(t, os.WriteFile(path, valid, 0o600))
	require.NoError(t, os.Truncate(path, gateway.MaxConfigBytes+1)) // sparse: nothing written
	_, err := gateway.LoadConfig(path)
	require.ErrorIs(t, err, gateway.ErrConfigTooLarge)
	assert.NotErrorIs(t, err, gateway.ErrInvalidConfig)
	assert.Contains(t, err.Error(), fmt.Sprint(gateway.MaxConfigBytes))
	assert.Contains(t, err.Error(), "16 MiB")
}

// A reload of a path that turned into a FIFO or a device is refused at once, logged as
// "config reload rejected" (ERROR), and the old configuration keeps serving; the watcher
// goes on (its next tick is taken: nothing blocks it), and the file made regular again is
// loaded. (Before: the reload hung, silently, and every later SIGHUP and watch reload
// with it: tester32 #3.)
func TestReloadRefusesNonRegularFilesWithoutBlocking(t *testing.T) {
	w := newWatchedFile(t)
	g, dir, path, logs, content, tick := w.g, w.dir, w.path, w.logs, w.content, w.tick
	rejected := func() int { return strings.Count(logs.String(), `"level":"ERROR","msg":"config reload rejected`) }
	tick(1)

	fifo := filepath.Join(dir, "fifo")
	mkfifo(t, fifo)
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.Symlink(fifo, path))
	tick(2) // the watcher sees another file, refuses it and takes the next ticks
	assert.Equal(t, 1, rejected(), logs.String())
	assert.Contains(t, logs.String(), "a named pipe (FIFO), not a regular file")
	assert.Contains(t, logs.String(), `"trigger":"watch"`)

	err := g.ReloadFileFor(path, gateway.TriggerSIGHUP, nil)
	require.ErrorIs(t, err, gateway.ErrConfigNotRegular, "a SIGHUP is refused at once too")
	assert.Equal(t, 2, rejected())
	assert.Equal(t, "b0", g.Config().Backends[0].ID, "the old config keeps serving")

	require.NoError(t, os.Remove(path))
	require.NoError(t, os.WriteFile(path, content("b1"), 0o600))
	tick(1)
	assert.Equal(t, "b1", g.Config().Backends[0].ID, "a regular file again is loaded")
}

// A FIFO as binding_snapshot is refused with its type in words.
func TestBindingSnapshotFIFOSaysWhatItIs(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "bindings.snap")
	mkfifo(t, fifo)
	_, err := gateway.New(gateway.Config{Backends: []gateway.BackendConfig{{ID: "a", URL: "http://h:1"}}, BindingSnapshot: fifo})
	require.ErrorIs(t, err, gateway.ErrBindingSnapshot)
	assert.Contains(t, err.Error(), "is a named pipe (FIFO), not a regular file")
}
