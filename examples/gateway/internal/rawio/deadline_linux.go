package rawio

import (
	"errors"
	"io"
	"os"
	"sync"
	"time"
)

// deadline is one direction's deadline, moved lazily: want is what the caller set,
// armed what the poller has (zero: none). A new deadline only reaches the poller when
// it is earlier than the armed one (or nothing is armed), so the runtime's timer is
// neither moved nor re-sorted (nor another thread woken to watch it) when a deadline
// moves later or is cleared — the common case of a server that sets a header, body or
// idle deadline per request. The price is an early wake-up at the armed time, which
// Read and Write absorb (see rearm). While eager is non-zero (a ReadFrom or WriteTo of
// the embedded *net.TCPConn, which do not absorb), every deadline goes to the poller.
type deadline struct {
	mu    sync.Mutex
	want  time.Time
	armed time.Time
	eager int
}

// set records t and passes it to apply (the *net.TCPConn's setter) unless the armed
// deadline comes no later than t. Safe for concurrent use; O(1), no allocation.
func (d *deadline) set(t time.Time, apply func(time.Time) error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.want = t
	if d.eager == 0 && !d.armed.IsZero() && (t.IsZero() || !t.Before(d.armed)) {
		return nil
	}
	return d.applyLocked(apply)
}

func (d *deadline) applyLocked(apply func(time.Time) error) error {
	if err := apply(d.want); err != nil {
		return err
	}
	d.armed = d.want
	return nil
}

// rearm reports whether err, returned by a Read or Write, is an early wake-up: the
// poller's deadline passed but the caller's has not (or was cleared). It then arms the
// caller's deadline, and the call is to be made again.
func (d *deadline) rearm(err error, apply func(time.Time) error) bool {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.armed.Equal(d.want) || (!d.want.IsZero() && !time.Now().Before(d.want)) {
		return false
	}
	return d.applyLocked(apply) == nil
}

// hold makes every deadline eager until release, and passes the caller's deadline to
// the poller now, for a call that does not absorb early wake-ups.
func (d *deadline) hold(apply func(time.Time) error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.eager++
	if !d.armed.Equal(d.want) {
		_ = d.applyLocked(apply)
	}
}

func (d *deadline) release() {
	d.mu.Lock()
	d.eager--
	d.mu.Unlock()
}

// SetDeadline sets the read and write deadlines (net.Conn); see SetReadDeadline.
func (c *conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline sets the read deadline as net.Conn's does; the poller's timer moves
// only when t is earlier than the one armed (see the package documentation).
func (c *conn) SetReadDeadline(t time.Time) error {
	if c.closed.Load() {
		return c.TCPConn.SetReadDeadline(t) // net's error
	}
	return c.rd.set(t, c.TCPConn.SetReadDeadline)
}

// SetWriteDeadline sets the write deadline as net.Conn's does; see SetReadDeadline.
func (c *conn) SetWriteDeadline(t time.Time) error {
	if c.closed.Load() {
		return c.TCPConn.SetWriteDeadline(t)
	}
	return c.wd.set(t, c.TCPConn.SetWriteDeadline)
}

// Close closes the connection (net.Conn).
func (c *conn) Close() error {
	c.closed.Store(true)
	return c.TCPConn.Close()
}

// ReadFrom is the *net.TCPConn's (splice, sendfile or a copy), with the write deadline
// eager while it runs.
func (c *conn) ReadFrom(r io.Reader) (int64, error) {
	c.wd.hold(c.TCPConn.SetWriteDeadline)
	defer c.wd.release()
	return c.TCPConn.ReadFrom(r)
}

// WriteTo is the *net.TCPConn's (splice or a copy), with the read deadline eager while
// it runs.
func (c *conn) WriteTo(w io.Writer) (int64, error) {
	c.rd.hold(c.TCPConn.SetReadDeadline)
	defer c.rd.release()
	return c.TCPConn.WriteTo(w)
}
