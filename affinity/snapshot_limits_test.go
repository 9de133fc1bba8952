package affinity_test

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
)

// A binding the snapshot format cannot hold (a session ID over 64 KiB; a backend ID over
// 4 KiB cannot be bound) is left out and counted; it does not make the whole snapshot
// unloadable.
func TestSnapshotSkipsRecordsTheFormatCannotHold(t *testing.T) {
	longSession := strings.Repeat("s", affinity.MaxSnapshotSessionIDBytes+1)
	longBackend := strings.Repeat("b", affinity.MaxBackendIDBytes+1)
	tests := []struct {
		name        string
		bind        func(t *testing.T, s *affinity.Scheduler)
		wantSkipped int
	}{
		{"session ID over 64 KiB through SelectBackend", func(t *testing.T, s *affinity.Scheduler) {
			_, _, err := s.SelectBackend(longSession, "", backends(t, 3))
			require.NoError(t, err)
		}, 1},
		{"session ID of exactly 64 KiB is kept", func(t *testing.T, s *affinity.Scheduler) {
			_, _, err := s.SelectBackend(longSession[1:], "", backends(t, 3))
			require.NoError(t, err)
		}, 0},
		{"backend ID over 4 KiB: Table.Bind refuses it, nothing to leave out", func(t *testing.T, s *affinity.Scheduler) {
			require.ErrorIs(t, s.Table().Bind("x", "", longBackend), affinity.ErrInvalidBackend)
		}, 0},
		{"backend ID of exactly 4 KiB is kept", func(t *testing.T, s *affinity.Scheduler) {
			require.NoError(t, s.Table().Bind("x", "", longBackend[1:]))
		}, 0},
		{"both", func(t *testing.T, s *affinity.Scheduler) {
			require.ErrorIs(t, s.Table().Bind("x", "", longBackend), affinity.ErrInvalidBackend)
			require.NoError(t, s.Table().Bind(longSession, "", "b00"))
		}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(600), MaxSessionIDBytes: 100_000}
			clk := affinitytest.NewClock(t0)
			src := newSnapScheduler(t, cfg, clk)
			for _, s := range []string{"alice", "bob", "carol"} {
				_, _, err := src.SelectBackend(s, "", backends(t, 3))
				require.NoError(t, err)
			}
			tt.bind(t, src)
			total := src.Len()

			var buf bytes.Buffer
			n, err := src.Snapshot(&buf)
			require.NoError(t, err)
			require.Equal(t, total-tt.wantSkipped, n)
			dst := newSnapScheduler(t, cfg, affinitytest.NewClock(t0))
			got, err := dst.Restore(bytes.NewReader(buf.Bytes()))
			require.NoError(t, err, "one record the format cannot hold must not void the file")
			require.Equal(t, total-tt.wantSkipped, got)
			for _, s := range []string{"alice", "bob", "carol"} {
				want, _ := src.Lookup(s, "")
				id, ok := dst.Lookup(s, "")
				require.True(t, ok, s)
				require.Equal(t, want, id, s)
			}

			st, err := src.WriteSnapshot(io.Discard)
			require.NoError(t, err)
			require.Equal(t, affinity.SnapshotWriteStats{Bindings: total - tt.wantSkipped, Skipped: tt.wantSkipped}, st)
		})
	}
}

func TestNewBackendIDLength(t *testing.T) {
	tests := []struct {
		n       int
		wantErr bool
	}{
		{1, false},
		{affinity.MaxBackendIDBytes, false},
		{affinity.MaxBackendIDBytes + 1, true},
		{1 << 20, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.n), func(t *testing.T) {
			b, err := affinity.NewBackend(strings.Repeat("b", tt.n), "addr", 1)
			if !tt.wantErr {
				require.NoError(t, err)
				require.Len(t, b.ID(), tt.n)
				return
			}
			require.ErrorIs(t, err, affinity.ErrInvalidBackend)
			require.Contains(t, err.Error(), fmt.Sprintf("%d bytes (max %d)", tt.n, affinity.MaxBackendIDBytes))
		})
	}
}

// countingReader serves n bytes of data's pattern (data, then zeros) and counts what was read.
type countingReader struct {
	head []byte
	left int64
	read int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), r.left)]
	for i := range p {
		p[i] = 0
	}
	k := copy(p, r.head)
	r.head = r.head[k:]
	r.left -= int64(len(p))
	r.read += int64(len(p))
	return len(p), nil
}

// Restore decodes as it reads: a huge input that stops being a snapshot after a few bytes
// is rejected without being read (let alone held in memory) whole.
func TestRestoreStopsReadingAtTheFirstBadByte(t *testing.T) {
	const size = 256 << 20
	good := func() []byte {
		src := newSnapScheduler(t, snapCfg(), affinitytest.NewClock(t0))
		_, _, err := src.SelectBackend("a", "", backends(t, 2))
		require.NoError(t, err)
		var buf bytes.Buffer
		_, err = src.Snapshot(&buf)
		require.NoError(t, err)
		return buf.Bytes()
	}()
	tests := []struct {
		name string
		head []byte
	}{
		{"magic then zeros", []byte(affinity.SnapshotMagic)},
		{"a valid snapshot then zeros", good},
		{"a huge record count then zeros", append([]byte(affinity.SnapshotMagic+"\x00\x00\x00\x00\x00\x00\x00\x00"), 0xff, 0xff, 0xff, 0xff, 0x0f)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &countingReader{head: tt.head, left: size}
			dst := newSnapScheduler(t, snapCfg(), affinitytest.NewClock(t0))
			n, err := dst.Restore(r)
			require.ErrorIs(t, err, affinity.ErrCorruptSnapshot)
			require.Zero(t, n)
			require.Zero(t, dst.Len())
			require.Less(t, r.read, int64(1<<20), "read %d of %d bytes", r.read, int64(size))
		})
	}
}

// The streaming decoder gets the same bindings whatever the reads look like: one byte at
// a time, half reads, fields longer than its buffer's remainder.
func TestRestoreReadShapes(t *testing.T) {
	cfg := affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(600), MaxSessionIDBytes: affinity.MaxSnapshotSessionIDBytes}
	src := newSnapScheduler(t, cfg, affinitytest.NewClock(t0))
	cands := backends(t, 4)
	var sessions []string
	for i := range 300 {
		s := fmt.Sprintf("sess-%d-", i) + strings.Repeat("x", (i*7919)%3000)
		if i%50 == 0 {
			s = fmt.Sprintf("%d", i) + strings.Repeat("y", affinity.MaxSnapshotSessionIDBytes-len(fmt.Sprint(i)))
		}
		sessions = append(sessions, s)
		_, _, err := src.SelectBackend(s, "", cands)
		require.NoError(t, err)
	}
	var buf bytes.Buffer
	n, err := src.Snapshot(&buf)
	require.NoError(t, err)
	require.Equal(t, 300, n)
	tests := []struct {
		name string
		r    func([]byte) io.Reader
	}{
		{"whole", func(b []byte) io.Reader { return bytes.NewReader(b) }},
		{"one byte at a time", func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) }},
		{"half reads", func(b []byte) io.Reader { return iotest.HalfReader(bytes.NewReader(b)) }},
		{"data with EOF", func(b []byte) io.Reader { return iotest.DataErrReader(bytes.NewReader(b)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := newSnapScheduler(t, cfg, affinitytest.NewClock(t0))
			st, err := dst.RestoreSnapshot(tt.r(buf.Bytes()))
			require.NoError(t, err)
			require.Equal(t, affinity.SnapshotRestoreStats{Records: 300, Stored: 300}, st)
			for _, s := range sessions {
				want, _ := src.Lookup(s, "")
				got, ok := dst.Lookup(s, "")
				require.True(t, ok)
				require.Equal(t, want, got)
			}
		})
	}
}

func TestRestoreSnapshotCounts(t *testing.T) {
	clk := affinitytest.NewClock(t0)
	src := newSnapScheduler(t, affinity.Config{
		StickyTTLSeconds:  affinity.TTLSeconds(600),
		MaxSessionIDBytes: 100,
		Tiers:             map[string]affinity.TierConfig{"short": {StickyTTLSeconds: affinity.TTLSeconds(60)}, "gone": {StickyTTLSeconds: affinity.TTLSeconds(600)}},
	}, clk)
	cands := backends(t, 3)
	bind := func(s, tier string) {
		_, _, err := src.SelectBackend(s, tier, cands)
		require.NoError(t, err)
	}
	bind("a", "")
	bind("b", "")
	bind("long-"+strings.Repeat("l", 50), "")
	bind("c", "short")
	bind("d", "gone")
	var buf bytes.Buffer
	_, err := src.Snapshot(&buf)
	require.NoError(t, err)

	clk2 := affinitytest.NewClock(t0.Add(2 * time.Minute)) // "short" expired in the downtime
	dst := newSnapScheduler(t, affinity.Config{
		StickyTTLSeconds:  affinity.TTLSeconds(600),
		MaxSessionIDBytes: 10,
		Tiers:             map[string]affinity.TierConfig{"short": {StickyTTLSeconds: affinity.TTLSeconds(60)}, "gone": {StickyTTLSeconds: affinity.TTLSeconds(0)}},
	}, clk2)
	require.NoError(t, dst.Table().Bind("b", "", "elsewhere")) // live: kept
	st, err := dst.RestoreSnapshot(&buf)
	require.NoError(t, err)
	require.Equal(t, affinity.SnapshotRestoreStats{Records: 5, Stored: 1, Expired: 2, TooLong: 1}, st)
}
