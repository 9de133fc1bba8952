package affinity

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"slices"
	"time"

	"github.com/agentserve/sessionaffinity/hrw"
)

// SnapshotRestoreStats is what [Table.RestoreSnapshot] did with a snapshot's records.
// Records - Stored - Expired - TooLong records were not stored for the other reasons
// Restore gives: their key already had a live binding, or the cap evicted them.
type SnapshotRestoreStats struct {
	// Records is the number of records in the snapshot.
	Records int
	// Stored is the number of records in the Table when it returned (what Restore returns).
	Stored int
	// Expired is the number of records dropped as expired: no TTL left once the time since
	// the snapshot was written is subtracted, or their tier's TTL is now 0.
	Expired int
	// TooLong is the number of records dropped because their session ID is longer than
	// the Table's max_session_id_bytes.
	TooLong int
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
//   - A snapshot stamped after the Clock's now (the saving clock was ahead of this one, or
//     this one was stepped back since) is aged from now, as if just written: min(stamp,
//     now). With the cut to the tier's TTL, no restored binding lives past its sticky TTL
//     counted from the restore, nor past the expiry the snapshot states (stamp +
//     remaining), whatever the stamp. Decision: the time since such a snapshot is
//     unknown, and refusing it instead would also refuse the in-process copy a gateway
//     makes on a reload (two Schedulers' clocks read the wall clock at different times,
//     so a step back between them puts the old one's stamps ahead of the new one's now).
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
// stores nothing. The input is decoded as it is read, and reading stops at the first
// byte that cannot belong to a snapshot (a file of zeros after the magic is rejected
// after its 21st byte, whatever its size); nothing after the checksum is read but one
// byte, to reject trailing data.
// Safe for concurrent use (each binding is stored under its shard's lock, like Bind).
// Cost: O(records log records) time; memory: a 64 KiB read buffer and the records that
// will be stored (those neither expired nor too long), about 80 bytes plus the IDs each,
// never a copy of the whole input (when r tells its size, through Len or a regular
// file's Stat, room for its records is made once, at most 2^20 of them).
func (t *Table) Restore(r io.Reader) (int, error) {
	st, err := t.RestoreSnapshot(r)
	return st.Stored, err
}

// RestoreSnapshot is [Table.Restore] returning what it did with the records as well:
// how many the snapshot held, how many it stored and how many it dropped as expired or
// too long. The stats are zero when it returns an error.
func (t *Table) RestoreSnapshot(r io.Reader) (SnapshotRestoreStats, error) {
	if r == nil {
		return SnapshotRestoreStats{}, fmt.Errorf("%w: Restore from a nil io.Reader", ErrNilIO)
	}
	now := t.clock.now()
	wall := t.wallNow()
	type pending struct {
		b       Binding
		lastUse int64
		cls     uint8
	}
	var ps []pending
	var st SnapshotRestoreStats
	size := sizeHint(r)
	records, err := decodeSnapshot(r, func(count uint64) {
		// Room for every record when r tells its size, up to 2^20 records (about 80
		// MB): each record takes at least 5 bytes, so a forged count cannot make this
		// allocate more than the input could hold, nor much at all; beyond, or when r
		// does not tell, ps grows as records arrive.
		if size >= 0 {
			ps = make([]pending, 0, min(count, uint64(size)/5, 1<<20))
		}
	}, func(written time.Time, b Binding) {
		cls, ok := t.classOf(b.Tier)
		if !ok {
			st.Expired++
			return
		}
		if t.checkKey(b.SessionID, b.Tier) != nil {
			st.TooLong++
			return
		}
		rem := b.Remaining - max(wall.Sub(written), 0) // a stamp ahead of wall: age 0
		if rem <= 0 {
			st.Expired++
			return
		}
		ttl := time.Duration(t.ttls[cls])
		rem = min(rem, ttl)
		ps = append(ps, pending{b: b, lastUse: now - int64(ttl-rem), cls: cls})
	})
	if err != nil {
		return SnapshotRestoreStats{}, err
	}
	st.Records = records
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
		evTier, ev := sh.insert(t, uint32(kh), p.b.Tier, p.b.SessionID, p.cls, p.b.BackendID, premix(hrw.NodeHash(p.b.BackendID)), p.lastUse, 0)
		sh.mu.Unlock()
		if ev {
			t.rec.Evicted(evTier)
			evicted = true
		}
		stored = append(stored, p)
	}
	if !evicted {
		st.Stored = len(stored)
		return st, nil
	}
	// The cap evicted some: a record evicted by a later one is not stored.
	for _, p := range stored {
		kh := hrw.KeyHash(p.b.SessionID)
		sh := t.shardFor(kh)
		sh.mu.Lock()
		if sh.idx.find(sh, uint32(kh), p.b.Tier, p.b.SessionID) != 0 {
			st.Stored++
		}
		sh.mu.Unlock()
	}
	return st, nil
}

// wallNow is the Table's clock as wall time.
func (t *Table) wallNow() time.Time { return t.clock.base.Add(time.Duration(t.clock.now())) }

// maxTTL bounds a stored remaining TTL (about 292 years: any int64 duration).
const maxTTL = time.Duration(1<<63 - 1)

// sizeHint returns the number of bytes r holds when it tells (a bytes.Reader,
// bytes.Buffer or strings.Reader through Len, a regular file through Stat), else -1.
func sizeHint(r io.Reader) int64 {
	switch v := r.(type) {
	case interface{ Len() int }:
		return int64(v.Len())
	case interface{ Stat() (fs.FileInfo, error) }:
		if fi, err := v.Stat(); err == nil && fi.Mode().IsRegular() {
			return fi.Size()
		}
	}
	return -1
}

// decodeSnapshot reads a whole snapshot from r, calls begin with the record count (not
// yet verified) and keep for each record as it is decoded (with the snapshot's write
// time), and returns the number of records once the checksum and the end of the input
// are verified. The caller must store nothing before it returns nil.
func decodeSnapshot(r io.Reader, begin func(count uint64), keep func(written time.Time, b Binding)) (int, error) {
	sr := &snapReader{src: r, buf: make([]byte, 64<<10)}
	corrupt := func(format string, args ...any) (int, error) {
		return 0, fmt.Errorf("%w: "+format, append([]any{ErrCorruptSnapshot}, args...)...)
	}
	magic, err := sr.next(len(SnapshotMagic))
	if err != nil {
		if sr.failed() {
			return 0, sr.readErr()
		}
		return corrupt("%d bytes, shorter than the %d-byte magic (truncated)", sr.n, len(SnapshotMagic))
	}
	if string(magic) != SnapshotMagic {
		return 0, fmt.Errorf("%w: header %q, want %q", ErrSnapshotVersion, magic, SnapshotMagic)
	}
	ts, err := sr.next(8)
	if err != nil {
		return sr.cut("header", err)
	}
	written := time.Unix(0, int64(binary.LittleEndian.Uint64(ts)))
	count, err := binary.ReadUvarint(sr)
	if err != nil {
		return sr.cut("record count", err)
	}
	begin(count)
	for k := uint64(0); k < count; k++ {
		var b Binding
		var rem uint64
		if b.Tier, err = sr.field(MaxTierBytes, false); err == nil {
			if b.SessionID, err = sr.field(MaxSnapshotSessionIDBytes, true); err == nil {
				if b.BackendID, err = sr.field(MaxBackendIDBytes, true); err == nil {
					rem, err = binary.ReadUvarint(sr)
				}
			}
		}
		if err == nil && (rem == 0 || rem > uint64(maxTTL)) {
			err = fmt.Errorf("remaining TTL %d ns", rem)
		}
		if err != nil {
			return sr.cut(fmt.Sprintf("record %d of %d", k+1, count), err) // counted from 1
		}
		b.Remaining = time.Duration(rem)
		keep(written, b)
	}
	want := sr.sum()
	sum, err := sr.next(4)
	if err != nil {
		return sr.cut("checksum", err)
	}
	if got := binary.LittleEndian.Uint32(sum); got != want {
		return corrupt("checksum %08x, want %08x (truncated or damaged)", got, want)
	}
	if _, err := sr.ReadByte(); err == nil {
		return corrupt("data after the checksum (%d bytes in)", sr.n)
	}
	if sr.failed() {
		return 0, sr.readErr()
	}
	return int(count), nil // each record took at least 5 bytes of the input: it fits an int
}

// snapReader reads a snapshot with bounded memory: a fixed buffer, and the CRC-32C of
// the bytes consumed so far (hashed a buffer at a time, not a byte at a time).
type snapReader struct {
	src  io.Reader
	buf  []byte
	h    int    // buf[h:r] is consumed and not yet hashed
	r, w int    // buf[r:w] is read from src and not yet consumed
	crc  uint32 // of every byte consumed before buf[h]
	n    int64  // bytes consumed
	err  error  // src's error (io.EOF at the end), once buf[r:w] is empty
}

// more makes buf[r:w] non-empty, reading from src; false at the end of the input or on
// src's error (s.err).
func (s *snapReader) more() bool {
	if s.r < s.w {
		return true
	}
	s.crc = crc32.Update(s.crc, snapshotCRC, s.buf[s.h:s.r])
	s.h, s.r, s.w = 0, 0, 0
	for s.w == 0 && s.err == nil {
		s.w, s.err = s.src.Read(s.buf)
	}
	return s.w > 0
}

// ReadByte consumes one byte (io.ByteReader, for binary.ReadUvarint).
func (s *snapReader) ReadByte() (byte, error) {
	if !s.more() {
		return 0, io.ErrUnexpectedEOF
	}
	c := s.buf[s.r]
	s.r++
	s.n++
	return c, nil
}

// next consumes n bytes (n <= len(buf)) and returns them; valid until the next call.
func (s *snapReader) next(n int) ([]byte, error) {
	if s.w-s.r < n && s.r > 0 { // make room: hash what is consumed, move the rest down
		s.crc = crc32.Update(s.crc, snapshotCRC, s.buf[s.h:s.r])
		s.w = copy(s.buf, s.buf[s.r:s.w])
		s.h, s.r = 0, 0
	}
	for s.w-s.r < n && s.err == nil {
		var k int
		k, s.err = s.src.Read(s.buf[s.w:])
		s.w += k
	}
	if s.w-s.r < n {
		s.n += int64(s.w - s.r)
		s.r = s.w
		return nil, io.ErrUnexpectedEOF
	}
	p := s.buf[s.r : s.r+n]
	s.r += n
	s.n += int64(n)
	return p, nil
}

// field reads a uvarint length and that many bytes, at most max (1..max when required).
func (s *snapReader) field(max int, required bool) (string, error) {
	n, err := binary.ReadUvarint(s)
	switch {
	case err != nil:
		return "", err
	case n > uint64(max):
		return "", fmt.Errorf("field of %d bytes", n)
	case n == 0 && required:
		return "", errors.New("empty ID")
	}
	p, err := s.next(int(n))
	if err != nil {
		return "", err
	}
	return string(p), nil
}

// sum returns the CRC-32C of every byte consumed so far.
func (s *snapReader) sum() uint32 {
	s.crc = crc32.Update(s.crc, snapshotCRC, s.buf[s.h:s.r])
	s.h = s.r
	return s.crc
}

// failed reports whether src returned an error other than io.EOF.
func (s *snapReader) failed() bool { return s.err != nil && !errors.Is(s.err, io.EOF) }

func (s *snapReader) readErr() error {
	return fmt.Errorf("affinity: read binding snapshot: %w", s.err)
}

// cut returns the error for err while reading what: src's own error, or
// ErrCorruptSnapshot (the input ended early, or held a bad value).
func (s *snapReader) cut(what string, err error) (int, error) {
	if s.failed() {
		return 0, s.readErr()
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		// The input ended where a count or a length said more was to come: a cut file, or
		// one of them damaged (tester52: a flipped length read as "truncated" alone).
		return 0, fmt.Errorf("%w: %s: the input ends after %d bytes: truncated, or a count or length before that point is damaged",
			ErrCorruptSnapshot, what, s.n)
	}
	return 0, fmt.Errorf("%w: %s: %v", ErrCorruptSnapshot, what, err)
}
