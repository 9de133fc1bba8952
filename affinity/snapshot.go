package affinity

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"
)

// Snapshot errors (sentinels, like those in errors.go). A Restore that returns one of
// them has stored nothing.
var (
	// ErrCorruptSnapshot: the snapshot is truncated (an input shorter than the 8-byte
	// magic, empty included, counts as truncated), fails its checksum, or holds a
	// record that cannot be a binding (empty session or backend ID, an oversized field).
	ErrCorruptSnapshot = errors.New("affinity: corrupt binding snapshot")
	// ErrSnapshotVersion: the input holds a complete 8-byte header that is not the magic
	// "SAFSNAP1" (not a snapshot, or a format version this build does not read).
	ErrSnapshotVersion = errors.New("affinity: unsupported binding snapshot format")
	// ErrNilIO: Snapshot got a nil io.Writer or Restore a nil io.Reader.
	ErrNilIO = errors.New("affinity: nil io.Reader or io.Writer")
)

// SnapshotMagic opens every binding snapshot: format name and version 1. A later,
// incompatible format gets a new magic ("SAFSNAP2"); readers reject what they do not know.
const SnapshotMagic = "SAFSNAP1"

// Limits of the snapshot format. The reader enforces them before it allocates (a corrupt
// length never makes it allocate much) and rejects a record over them as
// ErrCorruptSnapshot; the writer leaves out a binding over them (counted in
// [SnapshotWriteStats].Skipped) rather than write a snapshot its reader would reject
// whole.
const (
	// MaxSnapshotSessionIDBytes is the longest session ID a snapshot holds: 64 KiB.
	// A Config.MaxSessionIDBytes above it is valid, but the bindings of longer session IDs
	// are left out of snapshots (so do not survive a restart or a snapshot copy).
	MaxSnapshotSessionIDBytes = 1 << 16
	// MaxBackendIDBytes is the longest backend ID: 4 KiB. [NewBackend] and [Table.Bind]
	// refuse a longer one (ErrInvalidBackend), and Restore rejects a snapshot holding one
	// (ErrCorruptSnapshot), so no binding to a longer one is ever stored.
	MaxBackendIDBytes = 1 << 12
)

var snapshotCRC = crc32.MakeTable(crc32.Castagnoli)

// Binding is one valid binding as seen by [Table.Range] and stored in snapshots.
type Binding struct {
	Tier      string        // the tier ("" is the default tier)
	SessionID string        // the session ID
	BackendID string        // the backend the session is bound to
	Remaining time.Duration // time left before the binding expires (> 0)
}

// Range calls fn for every valid (unexpired) binding until fn returns false, in no
// particular order. It copies one shard's bindings under that shard's lock and calls fn
// after releasing it, so fn may call the Table; bindings made or removed concurrently may
// or may not be seen. It extends no TTL and counts nothing. Cost: O(bindings + shards),
// one allocation per shard for the batch.
func (t *Table) Range(fn func(Binding) bool) {
	var batch []Binding
	for s := range t.shards {
		sh := &t.shards[s]
		batch = batch[:0]
		sh.mu.Lock()
		now := t.clock.now()
		for c := range sh.lists {
			ttl := t.ttls[c]
			for i := sh.lists[c].head; i != 0; {
				e := sh.at(i)
				if rem := ttl - (now - e.lastUse); rem > 0 {
					batch = append(batch, Binding{
						Tier: tierOf(e.key), SessionID: sessionOf(e.key),
						BackendID: sh.idOf(e.slot), Remaining: time.Duration(rem),
					})
				}
				i = e.next
			}
		}
		sh.mu.Unlock()
		for _, b := range batch {
			if !fn(b) {
				return
			}
		}
	}
}

// SnapshotWriteStats is what [Table.WriteSnapshot] wrote.
type SnapshotWriteStats struct {
	// Bindings is the number of records written.
	Bindings int
	// Skipped is the number of valid bindings left out because the format cannot hold
	// them: a session ID over MaxSnapshotSessionIDBytes (or a backend ID over
	// MaxBackendIDBytes, which no binding has: Table.Bind refuses one). Such a binding is
	// lost across the snapshot; the others load.
	Skipped int
}

// Snapshot is [Table.WriteSnapshot] returning only the number of records written
// (Bindings); a binding the format cannot hold is left out without a word: use
// WriteSnapshot to learn how many were.
func (t *Table) Snapshot(w io.Writer) (int, error) {
	st, err := t.WriteSnapshot(w)
	return st.Bindings, err
}

// WriteSnapshot writes every valid binding to w in the snapshot format (below) and
// returns how many it wrote and how many it left out. A binding whose session ID is over
// MaxSnapshotSessionIDBytes or whose backend ID is over MaxBackendIDBytes is left out
// and counted in Skipped (decision: one binding the format cannot hold must not make the
// whole snapshot unloadable, as writing it would: [Table.Restore] rejects such a record
// as ErrCorruptSnapshot). The time stamp is the Table's clock (WithClock) as wall time.
// Bindings made while it runs may or may not be included. It does not stop the Table
// (safe for concurrent use; each shard is locked only while its bindings are copied):
// write a snapshot after the last request for an exact copy. Errors are w's, wrapped
// (the stats are then zero), and ErrNilIO for a nil w.
// Cost: O(bindings) time and one in-memory copy of them (about 60 bytes plus the IDs each).
//
// Format, version 1 (all integers little-endian or unsigned LEB128 varints):
//
//	magic     8 bytes  "SAFSNAP1"
//	written   8 bytes  int64, Unix time in nanoseconds when the snapshot was taken
//	                   (Restore ages records from min(written, its clock's now))
//	count     uvarint  number of records
//	record    count times: uvarint len + tier (<= MaxTierBytes), uvarint len + session
//	          ID (1..MaxSnapshotSessionIDBytes), uvarint len + backend ID
//	          (1..MaxBackendIDBytes), uvarint remaining TTL in nanoseconds (> 0)
//	checksum  4 bytes  CRC-32C (Castagnoli) of every preceding byte
func (t *Table) WriteSnapshot(w io.Writer) (SnapshotWriteStats, error) {
	if w == nil {
		return SnapshotWriteStats{}, fmt.Errorf("%w: Snapshot to a nil io.Writer", ErrNilIO)
	}
	var bs []Binding
	skipped := 0
	t.Range(func(b Binding) bool {
		if len(b.SessionID) > MaxSnapshotSessionIDBytes || len(b.BackendID) > MaxBackendIDBytes {
			skipped++
		} else {
			bs = append(bs, b)
		}
		return true
	})
	written := t.wallNow()

	crc := crc32.New(snapshotCRC)
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 64<<10)
	var num [binary.MaxVarintLen64]byte
	putUvarint := func(v uint64) { _, _ = bw.Write(binary.AppendUvarint(num[:0], v)) }
	putString := func(s string) { putUvarint(uint64(len(s))); _, _ = bw.WriteString(s) }

	_, _ = bw.WriteString(SnapshotMagic)
	_, _ = bw.Write(binary.LittleEndian.AppendUint64(num[:0], uint64(written.UnixNano())))
	putUvarint(uint64(len(bs)))
	for _, b := range bs {
		putString(b.Tier)
		putString(b.SessionID)
		putString(b.BackendID)
		putUvarint(uint64(b.Remaining))
	}
	if err := bw.Flush(); err != nil {
		return SnapshotWriteStats{}, fmt.Errorf("affinity: write binding snapshot: %w", err)
	}
	if _, err := w.Write(binary.LittleEndian.AppendUint32(nil, crc.Sum32())); err != nil {
		return SnapshotWriteStats{}, fmt.Errorf("affinity: write binding snapshot: %w", err)
	}
	return SnapshotWriteStats{Bindings: len(bs), Skipped: skipped}, nil
}

// Snapshot writes the Scheduler's bindings to w; see [Table.Snapshot] for the format and
// the errors (ErrNilIO for a nil w).
func (s *Scheduler) Snapshot(w io.Writer) (int, error) { return s.t.Snapshot(w) }

// WriteSnapshot writes the Scheduler's bindings to w and says how many it wrote and left
// out; see [Table.WriteSnapshot].
func (s *Scheduler) WriteSnapshot(w io.Writer) (SnapshotWriteStats, error) {
	return s.t.WriteSnapshot(w)
}

// Restore loads bindings written by [Scheduler.Snapshot]; see [Table.Restore] for what is
// kept, what is dropped and the errors: ErrCorruptSnapshot for a damaged or truncated
// input (empty, or shorter than the 8-byte header, included), ErrSnapshotVersion for a
// complete header with another magic or version, ErrNilIO for a nil r.
func (s *Scheduler) Restore(r io.Reader) (int, error) { return s.t.Restore(r) }

// RestoreSnapshot is [Scheduler.Restore] with the counts of [Table.RestoreSnapshot].
func (s *Scheduler) RestoreSnapshot(r io.Reader) (SnapshotRestoreStats, error) {
	return s.t.RestoreSnapshot(r)
}
