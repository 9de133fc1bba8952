//go:build !linux

package rawio

import "net"

// Wrap returns c unchanged: raw reads and writes are implemented on Linux only.
func Wrap(c net.Conn) net.Conn { return c }
