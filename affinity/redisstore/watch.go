package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentserve/sessionaffinity/affinity"
	"github.com/agentserve/sessionaffinity/metrics"
)

// Watch implements [affinity.Store.Watch]. A Store serves one Scheduler at a time: fn
// replaces the function registered before, so a gateway that rebuilds its Scheduler
// (a reload) hands the same Store to the new one, which takes over the invalidations.
func (s *Store) Watch(fn func(key affinity.StoreKey, backendID string)) {
	s.mu.Lock()
	s.watch = fn
	s.mu.Unlock()
}

// WatchResync implements [affinity.StoreWatchResync]: fn is called from the subscriber
// goroutine each time the subscription is re-established after a receive error (Redis
// restarted, a connection dropped), once Redis has confirmed the new SUBSCRIBE, so that
// invalidations flow again before the refreshes fn triggers are sent. Not called for the
// first subscription (which [New] starts in the background) when it succeeds at once. As with Watch, fn replaces the
// function registered before. Safe for concurrent use; O(1).
func (s *Store) WatchResync(fn func()) {
	s.mu.Lock()
	s.resync = fn
	s.mu.Unlock()
}

// Resyncs returns how many times the subscription was re-established after a receive
// error (each one a WatchResync call). Safe for concurrent use; one atomic load.
func (s *Store) Resyncs() uint64 { return s.resyncs.Load() }

// resynced runs on the subscriber goroutine when the subscription is back after a
// receive error: it counts, logs one INFO line and calls the WatchResync function.
func (s *Store) resynced() {
	s.resyncs.Add(1)
	if s.log != nil {
		s.log.Info("redisstore: invalidations resumed: messages sent while the subscription was down are lost, so each binding is refreshed on its next hit",
			"address", s.cfg.Address)
	}
	s.mu.Lock()
	fn := s.resync
	s.mu.Unlock()
	if fn != nil {
		fn()
	}
}

func (s *Store) notify(key affinity.StoreKey, backend string) {
	s.mu.Lock()
	fn := s.watch
	s.mu.Unlock()
	if fn != nil {
		fn(key, backend)
	}
}

// subscribe subscribes to the invalidation channel (in this goroutine, so that New does
// not wait for Redis) and delivers invalidations until ctx ends. go-redis reconnects and resubscribes
// after a connection loss; messages published meanwhile are lost. The first
// subscription confirmed after a receive error calls resynced, so that the Scheduler
// refreshes each binding on its next hit and a stale local copy is corrected then
// (without it, only by the session's next periodic refresh, up to TTL/8 later).
func (s *Store) subscribe(ctx context.Context, ps *redis.PubSub) {
	defer s.done.Done()
	// Connects (bounded by the dial timeout) and sends SUBSCRIBE. Its error needs no
	// handling here: the channel is recorded anyway, so the first Receive below
	// reconnects and resubscribes, or fails and is handled as any failed receive.
	_ = ps.Subscribe(ctx, s.channel)
	lost := false      // a receive failed since the last confirmed subscription
	warned := false    // and its WARN was logged
	confirmed := false // a subscription was confirmed once
	for {
		m, err := ps.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// Not for an unreachable Redis before the first confirmation: like the calls'
			// first outcome, the command's Ping at startup reports that.
			var reply redis.Error // Redis answered the SUBSCRIBE with an error (NOPERM)
			if !warned && (confirmed || errors.As(err, &reply)) {
				s.subscriptionLost(err)
				warned = true
			}
			lost = true
			s.fail(metrics.StoreOpWatch)
			select { // go-redis reconnects on the next receive; do not spin meanwhile
			case <-ctx.Done():
				return
			case <-time.After(s.cfg.retryAfter):
			}
			continue
		}
		msg, ok := m.(*redis.Message)
		if !ok {
			if sub, ok := m.(*redis.Subscription); ok && sub.Kind == "subscribe" { // (re)subscribed: Redis answers
				confirmed, warned = true, false
				if lost {
					lost = false
					s.resynced()
				}
			}
			continue // also a Pong
		}
		if strings.HasPrefix(msg.Payload, "!") { // a Sync marker
			s.mu.Lock()
			if ch, ok := s.syncs[msg.Payload]; ok {
				close(ch)
				delete(s.syncs, msg.Payload)
			}
			s.mu.Unlock()
			continue
		}
		if key, backend, ok := parseMessage(msg.Payload); ok {
			s.received.Add(1)
			s.notify(key, backend)
		}
	}
}

// Sync returns once every invalidation published (by any replica) before the call has
// been delivered to this store's Watch functions: it publishes a marker on the channel
// and waits for it (Redis delivers one connection's messages in publication order).
// For tests and for measuring the invalidation delay; it costs one round trip plus the
// delivery.
func (s *Store) Sync(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	s.mu.Lock()
	s.syncSeq++
	marker := "!" + s.self + ":" + strconv.FormatUint(s.syncSeq, 10)
	ch := make(chan struct{})
	s.syncs[marker] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.syncs, marker)
		s.mu.Unlock()
	}()
	// Published again every 100 ms: after a reconnect the subscription may not be back
	// yet, and a message published before it is lost.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := s.client.Publish(ctx, s.channel, marker).Err(); err != nil && ctx.Err() != nil {
			return err
		}
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
