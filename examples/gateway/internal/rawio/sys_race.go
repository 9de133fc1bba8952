//go:build linux && race

package rawio

import "syscall"

// Under the race detector reads and writes are plain system calls (syscall.Read and
// syscall.Write), which tell the detector what the kernel does: a read stores into its
// buffer, and a write happens before the read of its bytes, as net's own I/O does.
// Raw calls would hide those edges and make correct programs report races. Everything
// else (the poller's waits, deadlines, errors) is the same as without the detector.

// sysRead is read(2) through syscall.Read. p must not be empty.
func sysRead(fd uintptr, p []byte) (int, syscall.Errno) { return errno(syscall.Read(int(fd), p)) }

// sysWrite is write(2) through syscall.Write. p must not be empty.
func sysWrite(fd uintptr, p []byte) (int, syscall.Errno) { return errno(syscall.Write(int(fd), p)) }

func errno(n int, err error) (int, syscall.Errno) {
	if err != nil {
		return 0, err.(syscall.Errno)
	}
	return n, 0
}
