package gateway

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// ErrSnapshotInUse: [Gateway.Serve] found binding_snapshot's lock file
// (path+[SnapshotLockSuffix]) held by another process for longer than it waits for it —
// another gateway running with the same binding_snapshot. Serve returns it before
// loading or serving anything, and the snapshot file is left as it was.
var ErrSnapshotInUse = errors.New("gateway: binding snapshot in use by another process")

// SnapshotLockSuffix is appended to binding_snapshot's path to name the lock file
// [Gateway.Serve] holds from before the load until after the save (on Unix, an exclusive
// flock(2); the file is created empty and left in place).
const SnapshotLockSuffix = ".lock"

// snapshotLockPoll is how often a Serve waiting for the lock tries it again.
const snapshotLockPoll = 50 * time.Millisecond

// lockSnapshot takes the exclusive lock of the binding snapshot at path for Serve: at
// once, or, when another process holds it, after waiting for it to let go (a gateway
// being replaced, still draining: it saves, exits and so releases it, and this one then
// loads what it saved), at most drain_seconds + 10 s (the other's drain, its 2-s end and
// its save), logged at Warn when the wait starts and at Info when it ends. Decision
// (tester46: two gateways on one path both loaded the file and the last to save
// replaced the other's bindings; a gateway started while the one it replaced drained
// loaded nothing): wait, then refuse with ErrSnapshotInUse rather than start without the
// file, since two gateways cannot share one snapshot (use the store for that). It returns
// ctx's error if ctx ends while it waits. The returned func releases the lock. Where
// flock is not available (not Unix), it locks nothing.
func (g *Gateway) lockSnapshot(ctx context.Context, path string) (unlock func(), err error) {
	name := path + SnapshotLockSuffix
	// Read-only: flock needs no more, and a lock file the gateway's user may only read
	// (left by another user) still locks (tester48).
	f, err := os.OpenFile(name, os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("gateway: binding_snapshot lock: %w", err)
	}
	ok, err := tryLock(f)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("gateway: binding_snapshot lock %s: %w", name, err)
	}
	if !ok {
		wait := g.opts.snapLockWait
		if wait <= 0 {
			wait = duration(g.state().cfg.DrainSeconds) + 10*time.Second
		}
		start := time.Now()
		g.log.Warn("binding_snapshot is locked by another process (a gateway still draining, or one using the same file): waiting for it to save and exit",
			"lock", name, "wait_max", wait)
		poll := time.NewTicker(snapshotLockPoll)
		defer poll.Stop()
		limit := time.NewTimer(wait)
		defer limit.Stop()
		for !ok {
			select {
			case <-ctx.Done():
				_ = f.Close()
				return nil, ctx.Err()
			case <-limit.C:
				_ = f.Close()
				return nil, fmt.Errorf("%w: %s still held by another process after %v (another gateway with the same binding_snapshot? share bindings through the store instead)",
					ErrSnapshotInUse, name, wait)
			case <-poll.C:
				if ok, err = tryLock(f); err != nil {
					_ = f.Close()
					return nil, fmt.Errorf("gateway: binding_snapshot lock %s: %w", name, err)
				}
			}
		}
		g.log.Info("binding_snapshot lock acquired", "lock", name, "waited", time.Since(start))
	}
	return func() { _ = f.Close() }, nil // closing the file releases its flock
}
