//go:build unix

package gateway

import (
	"errors"
	"net"
	"syscall"
)

// alive reports whether an idle connection is still open: a non-blocking
// recv(MSG_PEEK) that finds nothing to read (EAGAIN). EOF (the backend closed it), an
// error, or unexpected bytes (an idle connection has nothing to say) mean it is not.
// One system call.
func alive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	var buf [1]byte
	if cerr := raw.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK)
		return true // never wait for readiness
	}); cerr != nil {
		return false
	}
	return ok
}
