//go:build !unix

package gateway

import "net"

// alive reports true: without a non-blocking peek, a connection the backend closed
// while idle is found on use (a stale keep-alive connection, retried on a fresh one).
func alive(net.Conn) bool { return true }

// peeker is alive bound to a connection (see hop_unix.go); here it always reports true.
type peeker struct{}

func (*peeker) init(net.Conn) {}
func (*peeker) alive() bool   { return true }
