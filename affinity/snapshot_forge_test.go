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
