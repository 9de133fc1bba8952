package affinity_test

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
)

// forgeSnapshot encodes bs in the documented snapshot format (see Table.WriteSnapshot),
// stamped written, whatever the writer would have left out: what another program, a
// damaged disk or a skewed clock can hand to Restore.
func forgeSnapshot(written time.Time, bs ...affinity.Binding) []byte {
	b := []byte(affinity.SnapshotMagic)
	b = binary.LittleEndian.AppendUint64(b, uint64(written.UnixNano()))
	b = binary.AppendUvarint(b, uint64(len(bs)))
	str := func(s string) { b = binary.AppendUvarint(b, uint64(len(s))); b = append(b, s...) }
	for _, r := range bs {
		str(r.Tier)
		str(r.SessionID)
		str(r.BackendID)
		b = binary.AppendUvarint(b, uint64(r.Remaining))
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

// A record whose backend ID is over MaxBackendIDBytes makes the snapshot corrupt (the
// writer never writes one): nothing is stored, not even the good records.
func TestRestoreBackendIDLimit(t *testing.T) {
	good := affinity.Binding{SessionID: "good", BackendID: "b00", Remaining: time.Minute}
	tests := []struct {
		name    string
		backend string
		wantErr error
	}{
		{"exactly the limit", strings.Repeat("b", affinity.MaxBackendIDBytes), nil},
		{"one byte over", strings.Repeat("b", affinity.MaxBackendIDBytes+1), affinity.ErrCorruptSnapshot},
		{"empty", "", affinity.ErrCorruptSnapshot},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := newSnapScheduler(t, snapCfg(), affinitytest.NewClock(t0))
			data := forgeSnapshot(t0, good, affinity.Binding{SessionID: "s", BackendID: tt.backend, Remaining: time.Minute})
			n, err := dst.Restore(bytes.NewReader(data))
			if tt.wantErr == nil {
				require.NoError(t, err)
				require.Equal(t, 2, n)
				id, ok := dst.Lookup("s", "")
				require.True(t, ok)
				require.Equal(t, tt.backend, id)
				return
			}
			require.ErrorIs(t, err, tt.wantErr)
			require.Zero(t, n)
			require.Zero(t, dst.Len(), "nothing stored")
		})
	}
}

// A snapshot stamped after the restoring clock's now (the saving clock was ahead, or
// this one stepped back) is aged from now: min(stamp, now). No binding it holds lives
// past its tier's sticky TTL counted from the restore, nor past the expiry the snapshot
// itself states (stamp + remaining), however far ahead the stamp or large the remaining
// TTL it claims.
func TestRestoreSnapshotFromTheFuture(t *testing.T) {
	tests := []struct {
		name     string
		written  time.Time
		tier     string
		remain   time.Duration
		wantLive time.Duration // how long the binding lives after the restore
	}{
		{"written now", t0, "", 10 * time.Minute, 10 * time.Minute},
		{"written 2 min ago", t0.Add(-2 * time.Minute), "", 10 * time.Minute, 8 * time.Minute},
		{"1 ns ahead", t0.Add(1), "", 10 * time.Minute, 10 * time.Minute},
		{"1 h ahead, 3 min left", t0.Add(time.Hour), "", 3 * time.Minute, 3 * time.Minute},
		{"1 h ahead, a remaining TTL of a year", t0.Add(time.Hour), "", 365 * 24 * time.Hour, 10 * time.Minute},
		{"in 2200, 1-min tier, 10 min left", time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC), "short", 10 * time.Minute, time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := affinitytest.NewClock(t0)
			dst := newSnapScheduler(t, snapCfg(), clk)
			data := forgeSnapshot(tt.written, affinity.Binding{Tier: tt.tier, SessionID: "s", BackendID: "b01", Remaining: tt.remain})
			st, err := dst.RestoreSnapshot(bytes.NewReader(data))
			require.NoError(t, err)
			require.Equal(t, affinity.SnapshotRestoreStats{Records: 1, Stored: 1}, st)
			clk.Advance(tt.wantLive - 1)
			_, ok := dst.Lookup("s", tt.tier)
			require.True(t, ok, "alive just before")
			clk.Advance(1)
			_, ok = dst.Lookup("s", tt.tier)
			require.False(t, ok, "expired at restore + %v", tt.wantLive)
		})
	}
}
