package metrics

import (
	"strconv"
	"strings"
	"sync"
)

// Kind is the kind of a recorded [Event]. The zero value is not a valid Kind.
type Kind uint8

const (
	KindHit          Kind = iota + 1 // a Recorder.Hit call
	KindMiss                         // a Recorder.Miss call
	KindBroken                       // a Recorder.Broken call
	KindEvicted                      // a Recorder.Evicted call
	KindUsage                        // a UsageRecorder.Usage call
	KindParentPlaced                 // a ParentRecorder.ParentPlaced call
)

// String returns "hit", "miss", "broken", "evicted", "usage" or "parent_placed"
// ("Kind(n)" for an invalid Kind).
func (k Kind) String() string {
	switch k {
	case KindHit:
		return "hit"
	case KindMiss:
		return "miss"
	case KindBroken:
		return "broken"
	case KindEvicted:
		return "evicted"
	case KindUsage:
		return "usage"
	case KindParentPlaced:
		return "parent_placed"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Event is one Recorder call captured by a [Recording]. Reason is set only for
// KindBroken and is 0 otherwise.
type Event struct {
	Kind   Kind   // which Recorder method was called
	Tier   string // the tier argument (copied)
	Reason Reason // the reason argument of Broken; 0 for other kinds
	// PromptTokens and CachedPromptTokens are the arguments of Usage; 0 for other kinds.
	PromptTokens, CachedPromptTokens int64
}

// String renders the event as `kind tier="..."` plus ` reason=...` for broken events and
// ` prompt=N cached=M` for usage events, e.g. `broken tier="gold" reason=down`.
func (e Event) String() string {
	var b strings.Builder
	b.WriteString(e.Kind.String())
	b.WriteString(" tier=")
	b.WriteString(strconv.Quote(e.Tier))
	if e.Kind == KindBroken || e.Reason != 0 {
		b.WriteString(" reason=")
		b.WriteString(e.Reason.String())
	}
	if e.Kind == KindUsage {
		b.WriteString(" prompt=")
		b.WriteString(strconv.FormatInt(e.PromptTokens, 10))
		b.WriteString(" cached=")
		b.WriteString(strconv.FormatInt(e.CachedPromptTokens, 10))
	}
	return b.String()
}

// Recording is a [Recorder] for tests: it appends every event, in call order, to an
// in-memory log. The zero value is ready to use. All methods are safe for concurrent use
// (one mutex); events from concurrent callers are logged in the order they took the lock.
// Memory grows with every event until [Recording.Reset]: do not use it in production.
type Recording struct {
	mu     sync.Mutex
	events []Event
}

func (r *Recording) record(e Event) {
	e.Tier = strings.Clone(e.Tier) // Recorders must not retain the caller's string.
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Hit logs a KindHit event.
func (r *Recording) Hit(tier string) { r.record(Event{Kind: KindHit, Tier: tier}) }

// Miss logs a KindMiss event.
func (r *Recording) Miss(tier string) { r.record(Event{Kind: KindMiss, Tier: tier}) }

// Broken logs a KindBroken event with its reason.
func (r *Recording) Broken(tier string, reason Reason) {
	r.record(Event{Kind: KindBroken, Tier: tier, Reason: reason})
}

// Evicted logs a KindEvicted event.
func (r *Recording) Evicted(tier string) { r.record(Event{Kind: KindEvicted, Tier: tier}) }

// Usage logs a KindUsage event with its token counts (as given).
func (r *Recording) Usage(tier string, promptTokens, cachedPromptTokens int64) {
	r.record(Event{Kind: KindUsage, Tier: tier, PromptTokens: promptTokens, CachedPromptTokens: cachedPromptTokens})
}

// Events returns a copy of the events logged so far, oldest first (nil if none).
// O(events), allocates the copy.
func (r *Recording) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) == 0 {
		return nil
	}
	out := make([]Event, len(r.events))
	copy(out, r.events)
	return out
}

// Len returns the number of events logged so far. O(1).
func (r *Recording) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// Reset discards every logged event and releases their memory. O(1).
func (r *Recording) Reset() {
	r.mu.Lock()
	r.events = nil
	r.mu.Unlock()
}

// Count returns how many events of kind k were logged for tier. O(events).
func (r *Recording) Count(k Kind, tier string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Kind == k && e.Tier == tier {
			n++
		}
	}
	return n
}

// CountBroken returns how many broken events with reason were logged for tier. O(events).
func (r *Recording) CountBroken(tier string, reason Reason) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Kind == KindBroken && e.Tier == tier && e.Reason == reason {
			n++
		}
	}
	return n
}

// Hits returns the number of hits logged for tier. O(events).
func (r *Recording) Hits(tier string) int { return r.Count(KindHit, tier) }

// Misses returns the number of misses logged for tier. O(events).
func (r *Recording) Misses(tier string) int { return r.Count(KindMiss, tier) }

// Evictions returns the number of evictions logged for tier. O(events).
func (r *Recording) Evictions(tier string) int { return r.Count(KindEvicted, tier) }
