package gateway

import (
	"sync/atomic"
	"time"
)

// Backend progress: the evidence that tells a wedged backend from a slow request.
//
// A response-header timeout or a stream stall counts as a connection failure for
// outlier detection only when the backend showed no progress on any request while the
// attempt waited: no response headers and no response-body bytes for any request to
// it since the attempt was sent (a header timeout) or since the stalled body Read
// began (a stall). When it made progress for other requests meanwhile, the timeout is
// this request being slow (a long generation, a huge prompt): the client still gets its
// 504 or cut stream and the lease is released with the error, but the backend's streak
// is not extended (logged at Info). Active health probes are not progress: a wedged
// engine can still answer /health, and they do not go through attempts.

// progressGranularity is how often one backend's progress time is written at most: a
// stream's every chunk would otherwise write the same shared cache line. The cost is
// resolution: progress within progressGranularity after the last recorded progress is
// not recorded, so a timeout whose wait began inside that window and saw progress only
// inside it counts as a failure, as it did before progress was tracked.
const progressGranularity = 64 * time.Millisecond

// progressEpoch is the reference of progress times (monotonic clock, the clock of the
// timeouts' timers: time.Now and time.Since), a granularity before the process started
// so that the first progress is always recorded.
var progressEpoch = time.Now().Add(-progressGranularity)

// monoNow is the monotonic time since progressEpoch, in ns.
func monoNow() int64 { return int64(time.Since(progressEpoch)) }

// monoAt is t as monotonic ns since progressEpoch.
func monoAt(t time.Time) int64 { return int64(t.Sub(progressEpoch)) }

// progress is one backend's last observed progress. Safe for concurrent use.
// Padded to a cache line of its own: progress records are small allocations of one
// size class, and the backends' would otherwise share lines.
type progress struct {
	last atomic.Int64 // monoNow of the last recorded progress; 0: none yet
	_    [56]byte
}

// mark records progress at now (monoNow), unless progress was recorded less than
// progressGranularity before: one atomic load, and a store at most once per
// granularity.
func (p *progress) mark(now int64) {
	if now-p.last.Load() >= int64(progressGranularity) {
		p.last.Store(now)
	}
}

// since reports whether progress was recorded after since (monoNow).
func (p *progress) since(since int64) bool { return p.last.Load() > since }

// keepProgress gives each backend of rt that old has with the same URL old's progress
// record, so attempts started before a reload and after it see each other's progress.
func (rt *routing) keepProgress(old *routing) {
	for _, b := range rt.backends {
		if o := old.byID[b.id]; o != nil && o.url.String() == b.url.String() {
			b.prog = o.prog
		}
	}
}
