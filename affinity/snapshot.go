package affinity

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"time"

	"github.com/agentserve/sessionaffinity/hrw"
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

// Limits a snapshot reader enforces before allocating, so that a corrupt length never
// makes it allocate much.
const (
	maxSnapshotSession = 1 << 16 // bytes of one session ID
	maxSnapshotBackend = 1 << 12 // bytes of one backend ID
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

// Snapshot writes every valid binding to w in the snapshot format (below) and returns how
// many it wrote. The time stamp is the Table's clock (WithClock) as wall time. Bindings
// made while it runs may or may not be included. It does not stop the Table (safe for
// concurrent use; each shard is locked only while its bindings are copied): write a
// snapshot after the last request for an exact copy. Errors are w's, wrapped, and
// ErrNilIO for a nil w.
// Cost: O(bindings) time and one in-memory copy of them (about 60 bytes plus the IDs each).
//
// Format, version 1 (all integers little-endian or unsigned LEB128 varints):
//
//	magic     8 bytes  "SAFSNAP1"
//	written   8 bytes  int64, Unix time in nanoseconds when the snapshot was taken
//	count     uvarint  number of records
//	record    count times: uvarint len + tier, uvarint len + session ID,
//	          uvarint len + backend ID, uvarint remaining TTL in nanoseconds (> 0)
//	checksum  4 bytes  CRC-32C (Castagnoli) of every preceding byte
func (t *Table) Snapshot(w io.Writer) (int, error) {
	if w == nil {
		return 0, fmt.Errorf("%w: Snapshot to a nil io.Writer", ErrNilIO)
	}
	var bs []Binding
	t.Range(func(b Binding) bool { bs = append(bs, b); return true })
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
		return 0, fmt.Errorf("affinity: write binding snapshot: %w", err)
	}
	if _, err := w.Write(binary.LittleEndian.AppendUint32(nil, crc.Sum32())); err != nil {
		return 0, fmt.Errorf("affinity: write binding snapshot: %w", err)
	}
	return len(bs), nil
}

// Restore reads a snapshot written by [Table.Snapshot] and stores its bindings, returning
// how many it stored: how many of its records are in the Table when it returns (a record
// evicted by the cap while Restore ran is not counted, so with no concurrent use the
// count never exceeds Len()). What restoring means:
//
//   - The remaining TTL is preserved minus the time since the snapshot was written (wall
//     clock of the Table's Clock): a binding with 10 min left, restored 2 min later, has 8
//     min left. Bindings with nothing left are dropped; so are bindings of a tier whose TTL
//     is now 0, and session IDs longer than the current max_session_id_bytes. A remaining
//     TTL above the tier's current TTL is cut to that TTL.
//   - A key that already has a binding in the table keeps it (the live binding is newer).
//   - Bindings are restored oldest first; beyond the cap the oldest are evicted (counted
//     as evictions), as if they had been made in that order.
//   - Backends are not checked: a binding to a backend that is gone is broken as
//     not_candidate when its session returns (SelectBackend's rule 4). Nothing is counted
//     as a hit, miss or broken binding by Restore itself.
//
// The whole input is read and verified before anything is stored: a truncated or
// damaged snapshot returns ErrCorruptSnapshot (so does an input too short to hold the
// 8-byte magic, empty included; a complete header other than the magic returns
// ErrSnapshotVersion; an error from r is returned wrapped; a nil r is ErrNilIO) and
// stores nothing.
// Safe for concurrent use (each binding is stored under its shard's lock, like Bind).
// Cost: O(records log records) time, the decoded records in memory while it runs.
func (t *Table) Restore(r io.Reader) (int, error) {
	if r == nil {
		return 0, fmt.Errorf("%w: Restore from a nil io.Reader", ErrNilIO)
	}
	bs, written, err := readSnapshot(r)
	if err != nil {
		return 0, err
	}
	down := t.wallNow().Sub(written)
	if down < 0 {
		down = 0
	}
	now := t.clock.now()
	type pending struct {
		b       Binding
		lastUse int64
		cls     uint8
	}
	ps := make([]pending, 0, len(bs))
	for _, b := range bs {
		cls, ok := t.classOf(b.Tier)
		if !ok || t.checkKey(b.SessionID, b.Tier) != nil {
			continue
		}
		rem := b.Remaining - down
		ttl := time.Duration(t.ttls[cls])
		if rem <= 0 {
			continue
		}
		rem = min(rem, ttl)
		ps = append(ps, pending{b: b, lastUse: now - int64(ttl-rem), cls: cls})
	}
	// Oldest first: each LRU list stays sorted by lastUse (insert keeps the newer of a
	// list's head and the given time, which is then always the given time).
	slices.SortStableFunc(ps, func(a, b pending) int {
		switch {
		case a.lastUse < b.lastUse:
			return -1
		case a.lastUse > b.lastUse:
			return 1
		}
		return 0
	})
	stored := ps[:0] // the records inserted, in place of ps
	evicted := false
	for _, p := range ps {
		kh := hrw.KeyHash(p.b.SessionID)
		sh := t.shardFor(kh)
		sh.mu.Lock()
		if sh.idx.find(sh, uint32(kh), p.b.Tier, p.b.SessionID) != 0 {
			sh.mu.Unlock()
			continue
		}
		evTier, ev := sh.insert(t, uint32(kh), p.b.Tier, p.b.SessionID, p.cls, p.b.BackendID, premix(hrw.NodeHash(p.b.BackendID)), p.lastUse)
		sh.mu.Unlock()
		if ev {
			t.rec.Evicted(evTier)
			evicted = true
		}
		stored = append(stored, p)
	}
	if !evicted {
		return len(stored), nil
	}
	// The cap evicted some: a record evicted by a later one is not stored.
	n := 0
	for _, p := range stored {
		kh := hrw.KeyHash(p.b.SessionID)
		sh := t.shardFor(kh)
		sh.mu.Lock()
		if sh.idx.find(sh, uint32(kh), p.b.Tier, p.b.SessionID) != 0 {
			n++
		}
		sh.mu.Unlock()
	}
	return n, nil
}

// wallNow is the Table's clock as wall time.
func (t *Table) wallNow() time.Time { return t.clock.base.Add(time.Duration(t.clock.now())) }

// readSnapshot reads and verifies a whole snapshot.
func readSnapshot(r io.Reader) ([]Binding, time.Time, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("affinity: read binding snapshot: %w", err)
	}
	if len(data) < len(SnapshotMagic) {
		return nil, time.Time{}, fmt.Errorf("%w: %d bytes, shorter than the %d-byte magic (truncated)", ErrCorruptSnapshot, len(data), len(SnapshotMagic))
	}
	if string(data[:len(SnapshotMagic)]) != SnapshotMagic {
		return nil, time.Time{}, fmt.Errorf("%w: header %q, want %q", ErrSnapshotVersion, data[:len(SnapshotMagic)], SnapshotMagic)
	}
	if len(data) < len(SnapshotMagic)+8+1+4 {
		return nil, time.Time{}, fmt.Errorf("%w: %d bytes, shorter than a header", ErrCorruptSnapshot, len(data))
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if got := crc32.Checksum(body, snapshotCRC); got != sum {
		return nil, time.Time{}, fmt.Errorf("%w: checksum %08x, want %08x (truncated or damaged)", ErrCorruptSnapshot, got, sum)
	}
	rd := bytes.NewReader(body[len(SnapshotMagic):])
	var ts [8]byte
	_, _ = io.ReadFull(rd, ts[:])
	written := time.Unix(0, int64(binary.LittleEndian.Uint64(ts[:])))
	count, err := binary.ReadUvarint(rd)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%w: record count: %v", ErrCorruptSnapshot, err)
	}
	// Each record takes at least 5 bytes: never trust count for the allocation.
	if count > uint64(rd.Len())/5 {
		return nil, time.Time{}, fmt.Errorf("%w: %d records in %d bytes", ErrCorruptSnapshot, count, rd.Len())
	}
	bs := make([]Binding, 0, count)
	for k := uint64(0); k < count; k++ {
		var b Binding
		var rem uint64
		if b.Tier, err = readField(rd, MaxTierBytes, false); err == nil {
			if b.SessionID, err = readField(rd, maxSnapshotSession, true); err == nil {
				if b.BackendID, err = readField(rd, maxSnapshotBackend, true); err == nil {
					rem, err = binary.ReadUvarint(rd)
				}
			}
		}
		if err == nil && (rem == 0 || rem > uint64(maxTTL)) {
			err = fmt.Errorf("remaining TTL %d ns", rem)
		}
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("%w: record %d: %v", ErrCorruptSnapshot, k, err)
		}
		b.Remaining = time.Duration(rem)
		bs = append(bs, b)
	}
	if rd.Len() != 0 {
		return nil, time.Time{}, fmt.Errorf("%w: %d bytes after the last record", ErrCorruptSnapshot, rd.Len())
	}
	return bs, written, nil
}

// maxTTL bounds a stored remaining TTL (about 292 years: any int64 duration).
const maxTTL = time.Duration(1<<63 - 1)

func readField(rd *bytes.Reader, max int, required bool) (string, error) {
	n, err := binary.ReadUvarint(rd)
	switch {
	case err != nil:
		return "", err
	case n > uint64(max) || n > uint64(rd.Len()):
		return "", fmt.Errorf("field of %d bytes", n)
	case n == 0 && required:
		return "", errors.New("empty ID")
	}
	buf := make([]byte, n)
	_, _ = io.ReadFull(rd, buf)
	return string(buf), nil
}

// Snapshot writes the Scheduler's bindings to w; see [Table.Snapshot] for the format and
// the errors (ErrNilIO for a nil w).
func (s *Scheduler) Snapshot(w io.Writer) (int, error) { return s.t.Snapshot(w) }

// Restore loads bindings written by [Scheduler.Snapshot]; see [Table.Restore] for what is
// kept, what is dropped and the errors: ErrCorruptSnapshot for a damaged or truncated
// input (empty, or shorter than the 8-byte header, included), ErrSnapshotVersion for a
// complete header with another magic or version, ErrNilIO for a nil r.
func (s *Scheduler) Restore(r io.Reader) (int, error) { return s.t.Restore(r) }
