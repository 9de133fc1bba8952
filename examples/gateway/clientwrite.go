package gateway

import (
	"net/http"
	"time"
)

// writeBound keeps a deadline on the client connection's writes
// (timeouts.client_write_seconds): set when the request starts, so that everything
// written for it, net/http's own writes included (a 100 Continue, the final flush
// after the handler returns), is bounded, and renewed before a write once an eighth of
// the bound has passed since it was last set, so that a write may block for between
// 7/8 of the bound and all of it. A time read per write, a deadline set at most every
// d/8: a stream of many small events pays no timer update per event. 0 allocs. Not
// safe for concurrent use (one per request, used by the goroutine writing the response).
type writeBound struct {
	conn deadliner     // nil: no bound (a writer that cannot take deadlines)
	d    time.Duration // the bound
	next time.Time     // when the deadline is due for renewal
}

// deadliner is what net/http's response writers (HTTP/1 and HTTP/2) implement for
// http.ResponseController.SetWriteDeadline.
type deadliner interface{ SetWriteDeadline(time.Time) error }

// writeDeadliner returns the first writer in rw's Unwrap chain that takes write
// deadlines, or nil. As http.ResponseController finds it, without its error value.
func writeDeadliner(rw http.ResponseWriter) deadliner {
	for {
		switch w := rw.(type) {
		case deadliner:
			return w
		case interface{ Unwrap() http.ResponseWriter }:
			rw = w.Unwrap()
		default:
			return nil
		}
	}
}

// start sets the first deadline on rw's connection, d from now. Without a writer that
// takes deadlines (an httptest.ResponseRecorder) or with d <= 0 nothing is bounded.
func (b *writeBound) start(rw http.ResponseWriter, d time.Duration) {
	b.conn = nil
	if d <= 0 {
		return
	}
	if c := writeDeadliner(rw); c != nil {
		now := time.Now()
		if c.SetWriteDeadline(now.Add(d)) == nil {
			b.conn, b.d, b.next = c, d, now.Add(d/8)
		}
	}
}

// renew moves the deadline to d from now if an eighth of d has passed since it was set.
func (b *writeBound) renew() {
	if b.conn == nil {
		return
	}
	if now := time.Now(); !now.Before(b.next) {
		if b.conn.SetWriteDeadline(now.Add(b.d)) == nil {
			b.next = now.Add(b.d / 8)
		}
	}
}
