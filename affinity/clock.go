package affinity

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Clock tells the Scheduler (and the Table) the current time; inject a fake one in tests
// (see package affinitytest). Implementations must be safe for concurrent use and should
// be monotonic: the Scheduler measures ages as Now().Sub(the time read at construction).
type Clock interface {
	// Now returns the current time. It is called once per SelectBackend (hit or miss with
	// a non-zero TTL) and per Table call that reads time, so it should be cheap.
	Now() time.Time
}

// ClockFunc adapts a function to [Clock].
type ClockFunc func() time.Time

// Now calls f.
func (f ClockFunc) Now() time.Time { return f() }

// CoarseClock is a [Clock] that reads the system clock once per tick instead of on every
// call, for gateways where the ~50 ns of time.Now on a virtual machine matters on the hit
// path: its Now costs one atomic load.
//
// The trade-off: every timestamp is up to one resolution late, so a binding may live up
// to one resolution longer than its TTL (10 ms against a 1800 s TTL is negligible).
//
// The clock only moves while [CoarseClock.Run] runs; the caller owns that goroutine
// (there is no hidden one). Stopped, it reads the time of its last tick.
type CoarseClock struct {
	base       time.Time
	resolution time.Duration
	elapsed    atomic.Int64 // nanoseconds since base, updated by Run
	running    atomic.Bool
}

// NewCoarseClock returns a CoarseClock that ticks every resolution (must be > 0, or it
// panics: a programmer error). It reads the system clock once now.
func NewCoarseClock(resolution time.Duration) *CoarseClock {
	if resolution <= 0 {
		panic(fmt.Sprintf("affinity: NewCoarseClock: resolution %v must be positive", resolution))
	}
	return &CoarseClock{base: time.Now(), resolution: resolution}
}

// Now returns the time of the last tick. 0 allocs, one atomic load.
func (c *CoarseClock) Now() time.Time { return c.base.Add(time.Duration(c.elapsed.Load())) }

// Run advances the clock every resolution until ctx is done, then returns ctx.Err().
// Running it twice at once is a programmer error: the second call returns
// ErrClockRunning immediately.
func (c *CoarseClock) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrClockRunning
	}
	defer c.running.Store(false)
	t := time.NewTicker(c.resolution)
	defer t.Stop()
	c.elapsed.Store(int64(time.Since(c.base)))
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			c.elapsed.Store(int64(time.Since(c.base)))
		}
	}
}

// clockReader turns a Clock into int64 nanoseconds on a monotonic base (the time read at
// construction), the unit the table stores.
type clockReader struct {
	clk    Clock // nil: the system clock
	coarse *CoarseClock
	base   time.Time
}

func newClockReader(c Clock) clockReader {
	switch c := c.(type) {
	case nil:
		return clockReader{base: time.Now()}
	case ClockFunc:
		if c == nil { // a nil function: the default, as a nil Clock
			return clockReader{base: time.Now()}
		}
	case *CoarseClock:
		if c == nil {
			return clockReader{base: time.Now()}
		}
		return clockReader{coarse: c, base: c.base}
	}
	return clockReader{clk: c, base: c.Now()}
}

// now is small enough to inline for the CoarseClock (one atomic load); other clocks call
// read.
func (r *clockReader) now() int64 {
	if c := r.coarse; c != nil {
		return c.elapsed.Load()
	}
	return r.read()
}

func (r *clockReader) read() int64 {
	switch {
	case r.clk == nil:
		return int64(time.Since(r.base))
	default:
		return int64(r.clk.Now().Sub(r.base))
	}
}
