//go:build unix && !linux

package gateway

import "syscall"

// recvPeek is recv(fd, buf, MSG_PEEK|MSG_DONTWAIT).
func recvPeek(fd uintptr, buf []byte) error {
	_, _, err := syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return err
}
