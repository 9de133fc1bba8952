package gateway

import (
	"syscall"
	"unsafe"
)

// recvPeek is recv(fd, buf, MSG_PEEK|MSG_DONTWAIT) as a raw system call: it never blocks,
// and a plain one would wake the runtime's sysmon thread when every P is idle (see
// internal/rawio). buf must not be empty.
func recvPeek(fd uintptr, buf []byte) error {
	_, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)),
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
