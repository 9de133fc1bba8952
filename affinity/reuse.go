package affinity

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agentserve/sessionaffinity/metrics"
)

// usageTable keeps the achieved reuse per tier (prompt and cached prompt tokens of hits),
// copy-on-write like metrics.Counters, bounded to maxUsageTiers tiers (the rest fold into
// metrics.OtherTier).
type usageTable struct {
	m  atomic.Pointer[map[string]*tierUsage]
	mu sync.Mutex
}

const maxUsageTiers = 64

type tierUsage struct{ prompt, cached atomic.Uint64 }

func (u *usageTable) add(tier string, prompt, cached int64) {
	var tu *tierUsage
	if m := u.m.Load(); m != nil {
		tu = (*m)[tier]
	}
	if tu == nil {
		tu = u.addTier(tier)
	}
	tu.prompt.Add(uint64(prompt))
	tu.cached.Add(uint64(cached))
}

func (u *usageTable) addTier(tier string) *tierUsage {
	u.mu.Lock()
	defer u.mu.Unlock()
	var old map[string]*tierUsage
	if p := u.m.Load(); p != nil {
		old = *p
	}
	if tu, ok := old[tier]; ok {
		return tu
	}
	if len(old) >= maxUsageTiers {
		tier = metrics.OtherTier
		if tu, ok := old[tier]; ok {
			return tu
		}
	}
	m := make(map[string]*tierUsage, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	tu := &tierUsage{}
	m[strings.Clone(tier)] = tu
	u.m.Store(&m)
	return tu
}

// TierReuse is the achieved prefix reuse of one tier: the prompt tokens of its affinity
// hits and how many of them the backends served from their prefix caches, as reported to
// [Lease.Done].
type TierReuse struct {
	PromptTokens       uint64
	CachedPromptTokens uint64
}

// Ratio returns CachedPromptTokens / PromptTokens, or 0 when nothing was reported.
func (r TierReuse) Ratio() float64 {
	if r.PromptTokens == 0 {
		return 0
	}
	return float64(r.CachedPromptTokens) / float64(r.PromptTokens)
}

// Reuse returns the achieved reuse of tier's affinity hits reported to Lease.Done (tiers
// beyond the first 64 are folded into metrics.OtherTier). Lock-free, 0 allocs.
func (s *Scheduler) Reuse(tier string) TierReuse {
	if m := s.ld.usage.m.Load(); m != nil {
		if tu, ok := (*m)[tier]; ok {
			c := tu.cached.Load()
			return TierReuse{PromptTokens: tu.prompt.Load(), CachedPromptTokens: c}
		}
	}
	return TierReuse{}
}
