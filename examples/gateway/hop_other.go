//go:build !unix

package gateway

import "net"

// alive reports true: without a non-blocking peek, a connection the backend closed
// while idle is found on use (a stale keep-alive connection, retried on a fresh one).
func alive(net.Conn) bool { return true }
