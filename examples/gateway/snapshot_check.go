package gateway

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// checkBindingSnapshot checks path (binding_snapshot; "" is off) where the gateway will
// write it: not a directory nor any other existing non-regular file (a device such as
// /dev/null, a FIFO, a socket: the save renames a new file over the path and would replace
// it), not an existing non-empty file that does not start with "SAFSNAP" (the magic of
// every snapshot version, affinity.SnapshotMagic: another file there, say the config
// itself, would be replaced at shutdown; a file that starts with NUL bytes instead is a
// damaged snapshot, as a crash can leave a file whose blocks were never written (it reads
// as zeros), and the load keeps it aside — tester52: it stopped the start, a crash loop
// under an orchestrator; a file that cannot be read is left to the load,
// which keeps it aside, unless noLoad: a reload naming a new path loads nothing, so it
// refuses such a file too), and its directory exists and takes a new file, tried by
// creating and removing a temporary file there, as [Gateway.SaveBindings] writes one and
// renames it over path. Errors wrap [ErrInvalidConfig] and [ErrBindingSnapshot] (and
// the os error). Cost: a few system calls.
func checkBindingSnapshot(path string, noLoad bool) error {
	return checkSnapshotPath(path, noLoad, snapshotHead)
}

// checkSnapshotPath is checkBindingSnapshot reading a file's first bytes with head (a
// seam for tests: a root test process can read any file).
func checkSnapshotPath(path string, noLoad bool, head func(string) (string, error)) error {
	if path == "" {
		return nil
	}
	if fi, err := os.Stat(path); err == nil {
		switch {
		case fi.IsDir():
			return invalid(ErrBindingSnapshot, "binding_snapshot: %q: is a directory; want a file path", path)
		case !fi.Mode().IsRegular(): // e.g. /dev/null: the save's rename would replace the device node
			return invalid(ErrBindingSnapshot, "binding_snapshot: %q: is %s; want a regular file or a new path", path, fileKind(fi.Mode()))
		case fi.Size() > 0:
			first, readErr := head(path)
			if readErr == nil && first != snapshotPrefix[:len(first)] && strings.Trim(first, "\x00") != "" {
				return invalid(ErrBindingSnapshot, "binding_snapshot: %q: exists and is not a binding snapshot (it starts with %q, not %q); "+
					"it would be replaced at shutdown: name a new path or a snapshot file", path, first, snapshotPrefix)
			}
			if readErr != nil && noLoad {
				return invalid(ErrBindingSnapshot, "binding_snapshot: %q: exists and cannot be read (%v), so it cannot be told from another file; "+
					"it would be replaced at shutdown: name a new path or a readable snapshot file", path, readErr)
			}
		}
	}
	// The lock Serve takes (snapshot_lock.go), when one is there already: checked here so
	// that a lock file Serve could not open is a config error at start, not an exit
	// after "gateway listening" (tester48).
	lock := path + SnapshotLockSuffix
	if fi, err := os.Stat(lock); err == nil {
		if !fi.Mode().IsRegular() {
			return invalid(ErrBindingSnapshot, "binding_snapshot: lock file %q is %s; want a regular file, or none (it is created)", lock, fileKind(fi.Mode()))
		}
		lf, err := os.Open(lock)
		if err != nil {
			return invalid(ErrBindingSnapshot, "binding_snapshot: lock file %q cannot be opened (%v): let the gateway's user read it, or remove it while no gateway runs", lock, err)
		}
		_ = lf.Close()
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".check*")
	if err != nil {
		why := err
		var pe *fs.PathError
		if errors.As(err, &pe) {
			why = pe.Err // the temporary name says nothing
		}
		return &configError{kind: ErrBindingSnapshot, cause: err,
			msg: fmt.Sprintf("binding_snapshot: %q: cannot create a file in directory %q: %v (the bindings are saved there at shutdown)", path, dir, why)}
	}
	name := f.Name()
	_ = f.Close()
	_ = os.Remove(name)
	return nil
}

// snapshotPrefix opens a binding snapshot of any version: affinity.SnapshotMagic
// ("SAFSNAP1") without its version byte.
const snapshotPrefix = "SAFSNAP"

// snapshotHead returns the first len(snapshotPrefix) bytes of the file at path (fewer for
// a shorter file: a prefix of snapshotPrefix is a truncated snapshot, which the load
// keeps aside), or the error that kept it from reading them.
func snapshotHead(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	head := make([]byte, len(snapshotPrefix))
	n, err := io.ReadFull(f, head)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		err = nil // shorter than the prefix: compared as it is
	}
	return string(head[:n]), err
}
