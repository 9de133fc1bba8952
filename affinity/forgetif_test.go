package affinity_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
)

// ForgetIf deletes a binding only while it names the given backend; everything else —
// another backend, another tier, no binding, an expired one, invalid arguments — gives
// false and leaves the table as it was.
func TestForgetIf(t *testing.T) {
	cands := backends(t, 3)
	for _, tt := range []struct {
		name                   string
		session, tier, backend string // the ForgetIf call; "" backend with bound: the bound one
		expire                 bool   // let the TTL run out first
		want                   bool
		kept                   bool // s's binding in the default tier is still there
	}{
		{name: "bound to it", session: "s", want: true},
		{name: "bound elsewhere", session: "s", backend: "elsewhere", kept: true},
		{name: "another tier", session: "s", tier: "gold", kept: true},
		{name: "no binding", session: "t", kept: true},
		{name: "expired", session: "s", expire: true},
		{name: "empty session", session: "", kept: true},
		{name: "session too long", session: strings.Repeat("s", affinity.DefaultMaxSessionIDBytes+1), kept: true},
		{name: "tier too long", session: "s", tier: strings.Repeat("t", affinity.MaxTierBytes+1), kept: true},
		{name: "empty backend", session: "s", backend: "-", kept: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, affinity.Config{StickyTTLSeconds: affinity.TTLSeconds(60)})
			bound, _ := f.sel(t, "s", "", cands)
			if tt.expire {
				f.clk.Advance(time.Minute)
			}
			backend := tt.backend
			switch backend {
			case "":
				backend = bound
			case "-":
				backend = ""
			}
			before := f.rec.Len()
			require.Equal(t, tt.want, f.s.ForgetIf(tt.session, tt.tier, backend))
			id, ok := f.s.Lookup("s", "")
			assert.Equal(t, tt.kept, ok)
			if tt.kept {
				assert.Equal(t, bound, id)
			}
			assert.Equal(t, before, f.rec.Len(), "ForgetIf counts nothing")
		})
	}
}

// The race ForgetIf closes: a request placed s on b, and before it asks to forget that
// binding (its backend answered 404, say), another request of s rebound it elsewhere.
// The new binding stays; Lookup then Forget would have deleted it.
func TestForgetIfKeepsARebind(t *testing.T) {
	f := newFixture(t, affinity.Config{})
	cands := backends(t, 3)
	first, _ := f.sel(t, "s", "", cands)
	second, hit := f.sel(t, "s", "", without(cands, first)) // first is no candidate: rebind
	require.False(t, hit)
	require.NotEqual(t, first, second)
	require.False(t, f.s.ForgetIf("s", "", first))
	id, ok := f.s.Lookup("s", "")
	require.True(t, ok)
	require.Equal(t, second, id)
}

// condStore is a memStore with the optional compare-and-delete (StoreForgetIf).
type condStore struct {
	*memStore
	forgetIfs int
	failIf    error
}

func (s *condStore) ForgetIf(_ context.Context, k affinity.StoreKey, b string) (bool, error) {
	s.mu.Lock()
	s.forgetIfs++
	if s.failIf != nil {
		s.mu.Unlock()
		return false, s.failIf
	}
	if v, ok := s.m[k]; !ok || v != b {
		s.mu.Unlock()
		return false, nil
	}
	delete(s.m, k)
	fns := s.watch
	s.mu.Unlock()
	for _, fn := range fns {
		fn(k, "")
	}
	return true, nil
}

var _ affinity.StoreForgetIf = (*condStore)(nil)

// With a store, ForgetIf deletes the shared binding after the local one matched, or when
// this replica holds none: with the store's compare-and-delete when it has one (a binding
// another replica moved elsewhere meanwhile is kept), with Forget otherwise, and only
// after a local match. A failing store call is counted and leaves the local result.
func TestForgetIfStore(t *testing.T) {
	cands := backends(t, 3)
	for _, tt := range []struct {
		name      string
		cond      bool   // the store implements StoreForgetIf
		moved     bool   // another replica rebound s in the store (not yet seen here)
		fail      error  // the store's ForgetIf fails
		arg       string // "other": ForgetIf with a backend s is not bound to
		replica2  bool   // ForgetIf on a second replica that holds no local binding of s
		want      bool
		inStore   bool // s is still bound in the store
		forgetIfs int
		errs      uint64
	}{
		{name: "plain store: Forget", want: true},
		{name: "plain store, moved elsewhere: Forget anyway", moved: true, want: true},
		{name: "compare-and-delete", cond: true, want: true, forgetIfs: 1},
		{name: "compare-and-delete keeps a move", cond: true, moved: true, want: true, inStore: true, forgetIfs: 1},
		{name: "no local match: no store call", cond: true, arg: "other", inStore: true},
		{name: "store error counted", cond: true, fail: errors.New("refused"), want: true, inStore: true, forgetIfs: 1, errs: 1},
		// No local binding (evicted, expired or never seen by this replica): only a
		// compare-and-delete may go to the store.
		{name: "no local binding: compare-and-delete", cond: true, replica2: true, want: true, forgetIfs: 1},
		{name: "no local binding: compare-and-delete keeps a move", cond: true, replica2: true, moved: true, inStore: true, forgetIfs: 1},
		{name: "no local binding: another backend", cond: true, replica2: true, arg: "other", inStore: true, forgetIfs: 1},
		{name: "no local binding, plain store: no call", replica2: true, inStore: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mem := newMemStore()
			var st affinity.Store = mem
			cs := &condStore{memStore: mem, failIf: tt.fail}
			if tt.cond {
				st = cs
			}
			f := newFixture(t, affinity.Config{}, affinity.WithStore(st))
			bound, _ := f.sel(t, "s", "", cands)
			require.Len(t, mem.m, 1)
			var key affinity.StoreKey
			for k := range mem.m {
				key = k
			}
			if tt.moved {
				mem.mu.Lock()
				mem.m[key] = "elsewhere"
				mem.mu.Unlock()
			}
			arg := bound
			if tt.arg == "other" {
				arg = "other"
			}
			caller := f.s
			if tt.replica2 {
				caller = newFixture(t, affinity.Config{}, affinity.WithStore(st)).s
			}
			require.Equal(t, tt.want, caller.ForgetIf("s", "", arg))
			mem.mu.Lock()
			_, in := mem.m[key]
			mem.mu.Unlock()
			assert.Equal(t, tt.inStore, in)
			assert.Equal(t, tt.forgetIfs, cs.forgetIfs)
			assert.Equal(t, tt.errs, caller.StoreErrors())
		})
	}
}
