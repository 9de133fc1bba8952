package affinitytest

import (
	"sync"
	"time"
)

// Clock is a fake clock for tests: Now returns the time last set by [NewClock],
// [Clock.Set] or [Clock.Advance], and never moves on its own. It implements
// affinity.Clock. The zero value is not ready; use [NewClock].
//
// All methods are safe for concurrent use; each costs one mutex lock, 0 allocs.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a fake clock reading start. The monotonic reading of start, if any,
// is stripped so that comparisons use the wall time the test chose.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start.Round(0)}
}

// Now returns the current fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (a negative d moves it back) and returns the new
// time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// Set moves the clock to t (monotonic reading stripped). Moving it backwards is allowed,
// but affinity.Scheduler assumes a monotonic clock and does not clamp it: until the clock
// passes its latest reading again, bindings look younger than they are (they expire
// later than a test may expect), while a hit or a new binding records no earlier lastUse
// than the newest one already in its shard's TTL list.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t.Round(0)
}
