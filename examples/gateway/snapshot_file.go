package gateway

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/agentserve/sessionaffinity/affinity"
)

// SaveBindings writes the current bindings to path in the affinity snapshot format
// (affinity.Table.Snapshot), atomically: to a temporary file in the same directory,
// synced, then renamed over path, so a crash never leaves half a snapshot. It returns how
// many bindings it wrote (a binding the format cannot hold is left out:
// affinity.Table.WriteSnapshot; the gateway's limits, [MaxBackendIDBytes] and
// [SessionIDBytesCap], make none). Safe for concurrent use; call it after the last
// request for an exact copy ([Gateway.Serve] does when binding_snapshot is set).
func (g *Gateway) SaveBindings(path string) (int, error) {
	st, err := g.saveBindings(path)
	return st.Bindings, err
}

func (g *Gateway) saveBindings(path string) (affinity.SnapshotWriteStats, error) {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return affinity.SnapshotWriteStats{}, fmt.Errorf("gateway: save bindings: %w", err)
	}
	st, err := g.state().sched.WriteSnapshot(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return affinity.SnapshotWriteStats{}, fmt.Errorf("gateway: save bindings: %w", err)
	}
	return st, nil
}

// LoadBindings restores the bindings saved by [Gateway.SaveBindings] at path and returns
// how many it stored (see affinity.Table.Restore: remaining TTL kept minus the time since
// the save, expired ones dropped, bindings to backends no longer configured break as
// not_candidate when their session returns). It leaves the file in place ([Gateway.Serve]
// removes it once loaded). A missing file returns -1 and nil. A damaged file returns an
// error wrapping affinity.ErrCorruptSnapshot or affinity.ErrSnapshotVersion and stores
// nothing; so does a file larger than [MaxSnapshotBytes] of the configuration, which is
// not read (decision: such a file cannot have been written with these limits, and reading
// it would cost memory and start-up time in proportion to its size).
// Memory: the bindings it stores and a 64 KiB buffer, never the whole file. Safe for
// concurrent use: a [Gateway.Reload] waits for it (one that built a new Scheduler
// meanwhile would copy the table before the load filled it, and the load would then fill
// the retired one: tester46, a SIGHUP during the start-up load lost every binding).
func (g *Gateway) LoadBindings(path string) (int, error) {
	st, err := g.loadBindings(path)
	if err != nil {
		return 0, err
	}
	return st.Stored, nil
}

// loadBindings is LoadBindings with the counts (Stored -1: no file).
func (g *Gateway) loadBindings(path string) (affinity.SnapshotRestoreStats, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return affinity.SnapshotRestoreStats{Stored: -1}, nil
	}
	if err != nil {
		return affinity.SnapshotRestoreStats{}, fmt.Errorf("gateway: load bindings: %w", err)
	}
	defer f.Close()
	g.reloadMu.Lock() // see LoadBindings
	defer g.reloadMu.Unlock()
	rt := g.state()
	if fi, err := f.Stat(); err != nil {
		return affinity.SnapshotRestoreStats{}, fmt.Errorf("gateway: load bindings: %w", err)
	} else if limit := MaxSnapshotBytes(rt.cfg); fi.Size() > limit {
		return affinity.SnapshotRestoreStats{}, fmt.Errorf("gateway: load bindings %s: %w: %d bytes, more than %d records of the longest kind take (%d bytes: affinity.max_bindings x the longest tier, session ID and backend ID this configuration accepts)",
			path, affinity.ErrCorruptSnapshot, fi.Size(), maxBindings(rt.cfg), limit)
	}
	st, err := rt.sched.RestoreSnapshot(f)
	if err != nil {
		return affinity.SnapshotRestoreStats{}, fmt.Errorf("gateway: load bindings %s: %w", path, err)
	}
	return st, nil
}

// MaxSnapshotBytes is the size of the largest binding snapshot cfg (validated, defaults
// applied) can write: the header and checksum, and affinity.max_bindings records each
// with the longest tier name (affinity.MaxTierBytes), session ID (max_session_id_bytes,
// plus [TenantTagBytes] with tenant scoping on) and backend ID ([MaxBackendIDBytes]) it
// accepts, and the longest TTL. [Gateway.LoadBindings] refuses a larger file as damaged
// without reading it. With the defaults it is about 850 MB (a full table of 1,048,576
// bindings of short IDs is about 60 MB). A snapshot written under larger limits
// (max_bindings or max_session_id_bytes lowered since) can exceed it: it is then kept
// aside as damaged, like any file this configuration cannot load.
func MaxSnapshotBytes(cfg Config) int64 {
	field := func(n int) int64 { return int64(n + len(binary.AppendUvarint(nil, uint64(n)))) }
	session := min(schedulerConfig(cfg).MaxSessionIDBytes, affinity.MaxSnapshotSessionIDBytes)
	if session == 0 {
		session = affinity.DefaultMaxSessionIDBytes
	}
	record := field(affinity.MaxTierBytes) + field(session) + field(MaxBackendIDBytes) + binary.MaxVarintLen64
	const header = int64(len(affinity.SnapshotMagic) + 8 + binary.MaxVarintLen64 + 4)
	return header + int64(maxBindings(cfg))*record
}

// maxBindings is affinity.max_bindings with its default applied.
func maxBindings(cfg Config) int {
	if cfg.Affinity.MaxBindings == 0 {
		return affinity.DefaultMaxBindings
	}
	return cfg.Affinity.MaxBindings
}
