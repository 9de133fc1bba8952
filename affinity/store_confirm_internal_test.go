package affinity

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// downStore is a Store whose every call fails.
type downStore struct{}

var errDown = errors.New("down")

func (downStore) Claim(context.Context, StoreKey, string, time.Duration) (string, bool, error) {
	return "", false, errDown
}

func (downStore) Rebind(context.Context, StoreKey, string, string, time.Duration) (string, bool, error) {
	return "", false, errDown
}
func (downStore) Refresh(StoreKey, string, time.Duration)    {}
func (downStore) Forget(context.Context, StoreKey) error     { return errDown }
func (downStore) Watch(func(key StoreKey, backendID string)) {}

// provisionalCount returns how many live bindings of s are marked provisional.
func provisionalCount(s *Scheduler) (n, total int) {
	for k := range s.t.shards {
		sh := &s.t.shards[k]
		sh.mu.Lock()
		for i := uint32(1); i < sh.next; i++ {
			if e := sh.at(i); e.key != "" {
				total++
				if e.lflags&flagProvisional != 0 {
					n++
				}
			}
		}
		sh.mu.Unlock()
	}
	return n, total
}

// Without a store no binding is ever marked provisional, whatever made it (miss, rebind
// of a Down or dropped backend, parent placement, load-aware Acquire); with a store that
// fails every call, each one is (the control: the test can fail).
func TestProvisionalOnlyWithAStore(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
		want func(total int) int
	}{
		{"no store", nil, func(int) int { return 0 }},
		{"failing store", []Option{WithStore(downStore{})}, func(total int) int { return total }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(Config{Load: LoadConfig{BalanceFactor: 1.25}}, tc.opts...)
			require.NoError(t, err)
			cands := make([]Backend, 4)
			for i := range cands {
				cands[i] = MustBackend(fmt.Sprintf("b%d", i), "", 1)
			}
			for i := range 200 {
				id := fmt.Sprintf("s%d", i)
				_, _, err := s.SelectBackend(id, "", cands)
				require.NoError(t, err)
				_, _, err = s.SelectBackendWithParent(id+"-child", id, "", cands)
				require.NoError(t, err)
				var l Lease
				require.NoError(t, s.Acquire(id+"-lease", "", cands, 100, &l))
				l.Done(DoneInfo{})
			}
			s.OnBackendDown("b0")
			for i := range 200 { // rebinds: b0 Down, b1 not a candidate
				_, _, err := s.SelectBackend(fmt.Sprintf("s%d", i), "", cands[2:])
				require.NoError(t, err)
			}
			n, total := provisionalCount(s)
			require.Greater(t, total, 400)
			require.Equal(t, tc.want(total), n)
		})
	}
}
