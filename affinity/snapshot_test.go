package affinity_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/affinity/affinitytest"
)

// snapCfg: 10 min default TTL, a 1 min tier and a tier with affinity off.
func snapCfg() affinity.Config {
	return affinity.Config{
		StickyTTLSeconds: affinity.TTLSeconds(600),
		Tiers: map[string]affinity.TierConfig{
			"short": {StickyTTLSeconds: affinity.TTLSeconds(60)},
			"off":   {StickyTTLSeconds: affinity.TTLSeconds(0)},
		},
	}
}

func newSnapScheduler(t *testing.T, cfg affinity.Config, clk *affinitytest.Clock) *affinity.Scheduler {
	t.Helper()
	s, err := affinity.New(cfg, affinity.WithClock(clk))
	require.NoError(t, err)
	return s
}

func TestSnapshotRestoreKeepsBindingsAndRemainingTTL(t *testing.T) {
	clk := affinitytest.NewClock(t0)
	src := newSnapScheduler(t, snapCfg(), clk)
	cands := backends(t, 4)
	want := map[string]string{}
	for i := range 200 {
		s := fmt.Sprintf("sess-%d", i)
		id, _, err := src.SelectBackend(s, "", cands)
		require.NoError(t, err)
		want[s] = id.ID()
	}
	_, _, err := src.SelectBackend("short-1", "short", cands)
	require.NoError(t, err)
	clk.Advance(4 * time.Minute) // default bindings: 6 min left; "short" expired
	var buf bytes.Buffer
	n, err := src.Snapshot(&buf)
	require.NoError(t, err)
	require.Equal(t, 200, n, "the expired short-tier binding is not written")

	tests := []struct {
		name      string
		downtime  time.Duration
		wantN     int
		aliveFor  time.Duration // a restored binding is still a hit after this
		expiresAt time.Duration // ... and expired at this
	}{
		{"restart in 1 min", time.Minute, 200, 5*time.Minute - time.Second, 5 * time.Minute},
		{"restart after the TTL", 7 * time.Minute, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk2 := affinitytest.NewClock(t0.Add(4*time.Minute + tt.downtime))
			dst := newSnapScheduler(t, snapCfg(), clk2)
			got, err := dst.Restore(bytes.NewReader(buf.Bytes()))
			require.NoError(t, err)
			require.Equal(t, tt.wantN, got)
			require.Equal(t, tt.wantN, dst.Len())
			if tt.wantN == 0 {
				return
			}
			for s, id := range want {
				gotID, ok := dst.Lookup(s, "")
				require.True(t, ok, s)
				require.Equal(t, id, gotID, "session %s restored to another backend", s)
			}
			clk2.Advance(tt.aliveFor)
			_, ok := dst.Lookup("sess-7", "")
			require.True(t, ok, "remaining TTL must be preserved minus the downtime")
			clk2.Advance(tt.expiresAt - tt.aliveFor)
			_, ok = dst.Lookup("sess-7", "")
			require.False(t, ok, "a restored binding must not outlive its remaining TTL")
		})
	}
}

func TestRestoreWithNewConfig(t *testing.T) {
	clk := affinitytest.NewClock(t0)
	src := newSnapScheduler(t, affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(600)}, clk)
	cands := backends(t, 3)
	for _, s := range []string{"a", "b"} {
		_, _, err := src.SelectBackend(s, "", cands)
		require.NoError(t, err)
		_, _, err = src.SelectBackend(s, "off", cands)
		require.NoError(t, err)
	}
	var buf bytes.Buffer
	_, err := src.Snapshot(&buf)
	require.NoError(t, err)

	// The new config: default TTL cut to 60 s, tier "off" disabled.
	clk2 := affinitytest.NewClock(t0)
	cfg := snapCfg()
	cfg.StickyTTLSeconds = affinity.TTLSeconds(60)
	dst := newSnapScheduler(t, cfg, clk2)
	// A live binding of "a" wins over the snapshot's.
	require.NoError(t, dst.Table().Bind("a", "", "elsewhere"))
	n, err := dst.Restore(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err)
	require.Equal(t, 1, n, "only b of the default tier: a is live, tier off has TTL 0")
	id, _ := dst.Lookup("a", "")
	require.Equal(t, "elsewhere", id)
	_, ok := dst.Lookup("b", "off")
	require.False(t, ok)
	clk2.Advance(60 * time.Second)
	_, ok = dst.Lookup("b", "")
	require.False(t, ok, "remaining TTL is cut to the tier's new TTL")
}

func TestRestoreRejectsDamagedSnapshots(t *testing.T) {
	clk := affinitytest.NewClock(t0)
	src := newSnapScheduler(t, snapCfg(), clk)
	cands := backends(t, 3)
	for i := range 50 {
		_, _, err := src.SelectBackend(fmt.Sprintf("s%d", i), "", cands)
		require.NoError(t, err)
	}
	var buf bytes.Buffer
	_, err := src.Snapshot(&buf)
	require.NoError(t, err)
	good := buf.Bytes()
	flip := func(i int) []byte { b := bytes.Clone(good); b[i] ^= 0x40; return b }

	tests := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, affinity.ErrCorruptSnapshot},
		{"empty slice", []byte{}, affinity.ErrCorruptSnapshot},
		{"one byte", good[:1], affinity.ErrCorruptSnapshot},
		{"magic cut", good[:7], affinity.ErrCorruptSnapshot},
		{"short non-snapshot", []byte(`{}`), affinity.ErrCorruptSnapshot},
		{"other magic, header only", []byte("SAFSNAP2"), affinity.ErrSnapshotVersion},
		{"other format", []byte(`{"bindings":[]}`), affinity.ErrSnapshotVersion},
		{"future version", append([]byte("SAFSNAP2"), good[8:]...), affinity.ErrSnapshotVersion},
		{"header only", good[:12], affinity.ErrCorruptSnapshot},
		{"truncated in a record", good[:len(good)/2], affinity.ErrCorruptSnapshot},
		{"checksum cut", good[:len(good)-1], affinity.ErrCorruptSnapshot},
		{"flipped byte in a record", flip(len(good) / 2), affinity.ErrCorruptSnapshot},
		{"flipped checksum", flip(len(good) - 1), affinity.ErrCorruptSnapshot},
		{"trailing garbage", append(bytes.Clone(good), 0), affinity.ErrCorruptSnapshot},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := newSnapScheduler(t, snapCfg(), affinitytest.NewClock(t0))
			n, err := dst.Restore(bytes.NewReader(tt.data))
			require.ErrorIs(t, err, tt.want)
			require.Zero(t, n)
			require.Zero(t, dst.Len(), "nothing may be half-loaded")
		})
	}
	t.Run("a damaged length reads past the end", func(t *testing.T) {
		one := newSnapScheduler(t, snapCfg(), affinitytest.NewClock(t0))
		_, _, err := one.SelectBackend("s0", "", cands)
		require.NoError(t, err)
		var b bytes.Buffer
		_, err = one.Snapshot(&b)
		require.NoError(t, err)
		// magic 8, stamp 8, count 1, tier length 0, session ID length 2, "s0", then the
		// backend ID's length: 10 more runs it past the TTL and the checksum.
		data := b.Bytes()
		require.Equal(t, []byte{1, 0, 2, 's', '0'}, data[16:21])
		data[21] += 10
		dst := newSnapScheduler(t, snapCfg(), affinitytest.NewClock(t0))
		_, err = dst.Restore(bytes.NewReader(data))
		require.ErrorIs(t, err, affinity.ErrCorruptSnapshot)
		require.ErrorContains(t, err, "record 1 of 1: the input ends after")
		require.ErrorContains(t, err, "truncated, or a count or length before that point is damaged")
		require.Zero(t, dst.Len())
	})
	t.Run("nil reader and writer", func(t *testing.T) {
		dst := newSnapScheduler(t, snapCfg(), affinitytest.NewClock(t0))
		n, err := dst.Restore(nil)
		require.ErrorIs(t, err, affinity.ErrNilIO)
		require.Zero(t, n)
		require.Zero(t, dst.Len())
		n, err = src.Snapshot(nil)
		require.ErrorIs(t, err, affinity.ErrNilIO)
		require.Zero(t, n)
		require.Equal(t, 50, src.Len(), "the table is untouched")
	})
	t.Run("reader error", func(t *testing.T) {
		dst := newSnapScheduler(t, snapCfg(), affinitytest.NewClock(t0))
		boom := errors.New("disk gone")
		_, err := dst.Restore(&failingReader{data: good[:20], err: boom})
		require.ErrorIs(t, err, boom)
		require.Zero(t, dst.Len())
	})
}

type failingReader struct {
	data []byte
	err  error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestRangeSeesValidBindingsOnly(t *testing.T) {
	clk := affinitytest.NewClock(t0)
	s := newSnapScheduler(t, snapCfg(), clk)
	tab := s.Table()
	require.NoError(t, tab.Bind("old", "short", "b1"))
	clk.Advance(30 * time.Second)
	require.NoError(t, tab.Bind("new", "", "b2"))
	clk.Advance(40 * time.Second) // "old" expired (60 s TTL)
	var got []affinity.Binding
	tab.Range(func(b affinity.Binding) bool { got = append(got, b); return true })
	require.Equal(t, []affinity.Binding{{Tier: "", SessionID: "new", BackendID: "b2", Remaining: 560 * time.Second}}, got)
	calls := 0
	require.NoError(t, tab.Bind("new2", "", "b2"))
	tab.Range(func(affinity.Binding) bool { calls++; return false })
	require.Equal(t, 1, calls, "Range stops when fn returns false")
}

// FuzzRestore: any input either restores without error or returns one of the sentinels
// and stores nothing; it never panics.
func FuzzRestore(f *testing.F) {
	s, _ := affinity.New(affinity.Config{})
	for i := range 3 {
		_ = s.Table().Bind(fmt.Sprintf("s%d", i), "t", "b")
	}
	var buf bytes.Buffer
	_, _ = s.Snapshot(&buf)
	f.Add(buf.Bytes())
	f.Add([]byte("SAFSNAP1"))
	f.Add([]byte("SAFSNAP1\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\x0f\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dst, err := affinity.New(affinity.Config{})
		require.NoError(t, err)
		n, err := dst.Restore(bytes.NewReader(data))
		if err != nil {
			require.True(t, errors.Is(err, affinity.ErrCorruptSnapshot) || errors.Is(err, affinity.ErrSnapshotVersion), "%v", err)
			require.Zero(t, dst.Len())
			return
		}
		require.Equal(t, n, dst.Len())
	})
}

// Example: save the bindings at shutdown, load them at the next start.
func ExampleScheduler_Snapshot() {
	cands := []affinity.Backend{
		affinity.MustBackend("vllm-a", "http://10.0.0.1:8000", 1),
		affinity.MustBackend("vllm-b", "http://10.0.0.2:8000", 1),
	}
	old, _ := affinity.New(affinity.Config{})
	before, _, _ := old.SelectBackend("session-42", "", cands)

	var file bytes.Buffer // os.Create in a real gateway
	n, _ := old.Snapshot(&file)
	fmt.Println("saved", n)

	next, _ := affinity.New(affinity.Config{})
	n, err := next.Restore(&file)
	fmt.Println("restored", n, err)
	after, hit, _ := next.SelectBackend("session-42", "", cands)
	fmt.Println(after.ID() == before.ID(), hit)
	// Output:
	// saved 1
	// restored 1 <nil>
	// true true
}

// Restore's count is what it leaves in the table: records the cap evicts while it runs
// (oldest first) are counted as evictions, not as stored.
func TestRestoreCountsWhatTheCapKeeps(t *testing.T) {
	clk := affinitytest.NewClock(t0)
	src := newSnapScheduler(t, affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(600)}, clk)
	cands := backends(t, 3)
	for i := range 10 {
		_, _, err := src.SelectBackend(fmt.Sprintf("s%d", i), "", cands)
		require.NoError(t, err)
		clk.Advance(time.Second)
	}
	var buf bytes.Buffer
	_, err := src.Snapshot(&buf)
	require.NoError(t, err)
	for _, maxB := range []int{1, 2, 10, 20} {
		t.Run(fmt.Sprint("max_bindings ", maxB), func(t *testing.T) {
			dst := newSnapScheduler(t, affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(600), MaxBindings: maxB}, affinitytest.NewClock(clk.Now()))
			n, err := dst.Restore(bytes.NewReader(buf.Bytes()))
			require.NoError(t, err)
			require.Equal(t, dst.Len(), n, "Restore's count against the table's")
			require.Equal(t, min(maxB, 10), n)
			require.Equal(t, uint64(10-n), dst.Stats().Evictions, "each record beyond the cap evicted once")
		})
	}
}
