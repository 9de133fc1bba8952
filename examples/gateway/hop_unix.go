//go:build unix

package gateway

import (
	"net"
	"syscall"
)

// alive reports whether an idle connection is still open: a non-blocking
// recv(MSG_PEEK) that finds nothing to read (EAGAIN). EOF (the backend closed it), an
// error, or unexpected bytes (an idle connection has nothing to say) mean it is not.
// One system call (raw on Linux, see recvPeek). The directTransport uses a peeker bound to the connection instead,
// which does the same without allocating.
func alive(c net.Conn) bool {
	var p peeker
	p.init(c)
	return p.alive()
}

// peeker is alive's check bound once to one connection (its syscall.RawConn and the
// callback), so that checking an idle connection before reuse allocates nothing. Not
// safe for concurrent use: the pool hands a connection to one request at a time.
type peeker struct {
	raw    syscall.RawConn // nil: not a syscall.Conn, taken as alive
	broken bool            // SyscallConn failed: taken as closed
	fn     func(fd uintptr) bool
	ok     bool
	buf    [1]byte
}

// init binds p to c.
func (p *peeker) init(c net.Conn) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		p.broken = true
		return
	}
	p.raw, p.fn = raw, p.peek
}

func (p *peeker) peek(fd uintptr) bool {
	err := recvPeek(fd, p.buf[:])
	p.ok = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
	return true // never wait for readiness
}

// alive reports whether the connection is still open (see alive).
func (p *peeker) alive() bool {
	if p.broken {
		return false
	}
	if p.raw == nil {
		return true
	}
	p.ok = false
	if err := p.raw.Read(p.fn); err != nil {
		return false
	}
	return p.ok
}
