package rawio

import "net"

// Listener returns ln with every connection it accepts passed through [Wrap]. Safe for
// concurrent use as ln is; Accept's errors are ln's, unchanged.
func Listener(ln net.Listener) net.Listener { return listener{ln} }

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	return Wrap(c), nil
}
