package rawio

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// Wrap returns a *net.TCPConn's reads and writes as raw system calls (see the package
// documentation); any other connection, or one whose syscall.RawConn is unavailable, is
// returned unchanged. The returned connection is safe for concurrent use like the one it
// wraps (concurrent Reads, and concurrent Writes, are serialized as net serializes
// them). Its deadlines behave as net's but move the poller's timer lazily (see the
// package documentation); everything else is the *net.TCPConn's own (CloseWrite,
// SyscallConn, and ReadFrom and WriteTo, during which deadlines are passed on eagerly).
// Costs six allocations; each Read, Write or deadline change then allocates nothing
// unless it returns an error.
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	rc := &conn{TCPConn: tc}
	rc.r.fn, rc.r.wait = rc.r.read, raw.Read
	rc.w.fn, rc.w.wait = rc.w.write, raw.Write
	return rc
}

// conn is a wrapped TCP connection. It embeds the *net.TCPConn for everything but Read
// and Write: ReadFrom and WriteTo stay net's (io.Copy's splice and sendfile, whose few
// large system calls gain nothing from being raw).
type conn struct {
	*net.TCPConn
	r      op
	w      op
	rd     deadline
	wd     deadline
	closed atomic.Bool
}

// op is one direction of the connection: wait is the RawConn's Read or Write, fn the
// system call it runs until fn returns true (both bound once, so that a call allocates
// nothing), and buf, n and err the state of the call in progress. mu serializes callers:
// the RawConn serializes the callbacks, but buf and n belong to one call.
type op struct {
	mu   sync.Mutex
	wait func(func(fd uintptr) bool) error
	fn   func(fd uintptr) bool
	buf  []byte
	n    int
	err  syscall.Errno
}

// run runs one Read or Write of p through the poller: the bytes done, the system call's
// errno, and the poller's error (deadline, closed).
func (o *op) run(p []byte) (int, syscall.Errno, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf, o.n, o.err = p, 0, 0
	err := o.wait(o.fn)
	o.buf = nil
	return o.n, o.err, err
}

// read is one read(2) into o.buf; false (wait for readiness and call again) on EAGAIN.
func (o *op) read(fd uintptr) bool {
	for {
		n, e := sysRead(fd, o.buf)
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		o.n, o.err = n, e
		return true
	}
}

// write writes o.buf from o.n on, as many write(2) calls as it takes; false (wait for
// readiness and call again) on EAGAIN.
func (o *op) write(fd uintptr) bool {
	for o.n < len(o.buf) {
		n, e := sysWrite(fd, o.buf[o.n:])
		switch e {
		case 0:
			o.n += n
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			o.err = e
			return true
		}
	}
	return true
}

// Read reads like net.TCPConn's Read: at least one byte, or 0 and io.EOF when the peer
// has closed its side, or an error.
func (c *conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return c.TCPConn.Read(p) // net's answer: an error when closed, else 0, nil
	}
	n, e, err := c.r.run(p)
	for err != nil && c.rd.rearm(err, c.TCPConn.SetReadDeadline) {
		n, e, err = c.r.run(p)
	}
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case e != 0:
		return 0, c.opError("read", os.NewSyscallError("read", e))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of p like net.TCPConn's Write, or returns how much it wrote and an
// error.
func (c *conn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		_, err := c.TCPConn.Write(p) // net's answer: an error when closed or past the deadline
		for err != nil && c.wd.rearm(err, c.TCPConn.SetWriteDeadline) {
			_, err = c.TCPConn.Write(p)
		}
		return 0, err
	}
	n, e, err := c.w.run(p)
	for err != nil && n < len(p) && c.wd.rearm(err, c.TCPConn.SetWriteDeadline) {
		var m int
		m, e, err = c.w.run(p[n:])
		n += m
	}
	switch {
	case err != nil:
		return n, c.opError("write", err)
	case e != 0:
		return n, c.opError("write", os.NewSyscallError("write", e))
	}
	return n, nil
}

// opError shapes err as net's own Read and Write report theirs: an *net.OpError with
// op (the RawConn's errors say "raw-read" and "raw-write").
func (c *conn) opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		cp := *oe
		cp.Op = op
		return &cp
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
