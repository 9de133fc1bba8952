package rawio_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentserve/sessionaffinity/examples/gateway/internal/rawio"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pair returns a connected loopback pair: the dialed end and the accepted end, each
// wrapped when wrap is set (the accepted one through Listener). Both are closed at the
// end of the test.
func pair(t testing.TB, wrap bool) (dialed, accepted net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	if wrap {
		ln = rawio.Listener(ln)
	}
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	d, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	r := <-ch
	require.NoError(t, r.err)
	if wrap {
		d = rawio.Wrap(d)
	}
	t.Cleanup(func() { _ = d.Close(); _ = r.c.Close() })
	return d, r.c
}

func TestWrap(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	assert.Same(t, a, rawio.Wrap(a), "a connection that is not a *net.TCPConn is returned unchanged")

	d, acc := pair(t, true)
	for _, c := range []net.Conn{d, acc} {
		if runtime.GOOS == "linux" {
			_, isTCP := c.(*net.TCPConn)
			assert.False(t, isTCP, "wrapped on Linux")
		}
		_, ok := c.(interface{ CloseWrite() error })
		assert.True(t, ok, "CloseWrite kept")
		_, ok = c.(syscall.Conn)
		assert.True(t, ok, "SyscallConn kept")
		_, ok = c.(io.ReaderFrom)
		assert.True(t, ok, "ReadFrom kept")
	}
}

// TestTransfer sends payloads larger than the socket buffers both ways while the other
// end reads in small pieces, so that writes come back partial and wait for readiness
// and reads wait for data.
func TestTransfer(t *testing.T) {
	for _, size := range []int{1, 4096, 3<<20 + 7} {
		for _, dir := range []string{"wrapped writes", "wrapped reads"} {
			t.Run(dir+"/"+strconv.Itoa(size), func(t *testing.T) {
				w, r := pair(t, true)
				if dir == "wrapped reads" {
					plainW, plainR := pair(t, false)
					w, r = plainW, rawio.Wrap(plainR)
				}
				payload := make([]byte, size)
				for i := range payload {
					payload[i] = byte(i * 7)
				}
				errc := make(chan error, 1)
				go func() {
					_, err := w.Write(payload)
					if err == nil {
						err = w.(interface{ CloseWrite() error }).CloseWrite()
					}
					errc <- err
				}()
				h := sha256.New()
				buf := make([]byte, 1000)
				var got int
				for {
					n, err := r.Read(buf)
					h.Write(buf[:n])
					got += n
					if err == io.EOF {
						break
					}
					require.NoError(t, err)
					require.Positive(t, n)
				}
				require.NoError(t, <-errc)
				assert.Equal(t, size, got)
				want := sha256.Sum256(payload)
				assert.Equal(t, want[:], h.Sum(nil))
			})
		}
	}
}

// errorShape is what callers see of an error: net's Op, whether it is a timeout, and its
// text with the connection's addresses replaced.
func errorShape(c net.Conn, err error) string {
	if err == nil {
		return "<nil>"
	}
	var oe *net.OpError
	op := "-"
	if errors.As(err, &oe) {
		op = oe.Op
	}
	var ne net.Error
	timeout := errors.As(err, &ne) && ne.Timeout()
	text := strings.ReplaceAll(err.Error(), c.LocalAddr().String(), "L")
	text = strings.ReplaceAll(text, c.RemoteAddr().String(), "R")
	return op + " timeout=" + strconv.FormatBool(timeout) + " " + text
}

// TestErrorsAsNet checks each way a read or write fails against a plain *net.TCPConn
// failing the same way: same Op, same Timeout, same text, same errors.Is targets.
func TestErrorsAsNet(t *testing.T) {
	past := time.Unix(1, 0)
	cases := []struct {
		name string
		is   error
		run  func(t *testing.T, c, peer net.Conn) error
	}{
		{"read deadline", os.ErrDeadlineExceeded, func(t *testing.T, c, _ net.Conn) error {
			require.NoError(t, c.SetReadDeadline(past))
			_, err := c.Read(make([]byte, 8))
			return err
		}},
		{"write deadline", os.ErrDeadlineExceeded, func(t *testing.T, c, _ net.Conn) error {
			require.NoError(t, c.SetWriteDeadline(past))
			_, err := c.Write([]byte("x"))
			return err
		}},
		{"read after close", net.ErrClosed, func(t *testing.T, c, _ net.Conn) error {
			require.NoError(t, c.Close())
			_, err := c.Read(make([]byte, 8))
			return err
		}},
		{"write after close", net.ErrClosed, func(t *testing.T, c, _ net.Conn) error {
			require.NoError(t, c.Close())
			_, err := c.Write([]byte("x"))
			return err
		}},
		{"empty read past the deadline", nil, func(t *testing.T, c, _ net.Conn) error {
			require.NoError(t, c.SetReadDeadline(past))
			_, err := c.Read(nil)
			return err
		}},
		{"empty write past the deadline", os.ErrDeadlineExceeded, func(t *testing.T, c, _ net.Conn) error {
			require.NoError(t, c.SetWriteDeadline(past))
			_, err := c.Write([]byte{})
			return err
		}},
		{"empty read after close", net.ErrClosed, func(t *testing.T, c, _ net.Conn) error {
			require.NoError(t, c.Close())
			_, err := c.Read(nil)
			return err
		}},
		{"empty write after close", net.ErrClosed, func(t *testing.T, c, _ net.Conn) error {
			require.NoError(t, c.Close())
			_, err := c.Write(nil)
			return err
		}},
		{"set a deadline after close", net.ErrClosed, func(t *testing.T, c, _ net.Conn) error {
			require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Hour)))
			require.NoError(t, c.Close())
			return c.SetReadDeadline(time.Now().Add(2 * time.Hour)) // later: the lazy case
		}},
		{"clear a deadline after close", net.ErrClosed, func(t *testing.T, c, _ net.Conn) error {
			require.NoError(t, c.SetWriteDeadline(time.Now().Add(time.Hour)))
			require.NoError(t, c.Close())
			return c.SetDeadline(time.Time{})
		}},
		{"read after a passed deadline moved later", nil, func(t *testing.T, c, peer net.Conn) error {
			require.NoError(t, c.SetReadDeadline(past))
			_, err := c.Read(make([]byte, 8))
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
			require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Hour)))
			_, err = peer.Write([]byte("x"))
			require.NoError(t, err)
			_, err = c.Read(make([]byte, 8))
			return err
		}},
		{"write after a passed deadline was cleared", nil, func(t *testing.T, c, _ net.Conn) error {
			require.NoError(t, c.SetWriteDeadline(past))
			_, err := c.Write([]byte("x"))
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
			require.NoError(t, c.SetWriteDeadline(time.Time{}))
			if _, err := c.Write(nil); err != nil {
				return err
			}
			_, err = c.Write([]byte("x"))
			return err
		}},
		{"peer closed", io.EOF, func(t *testing.T, c, peer net.Conn) error {
			require.NoError(t, peer.Close())
			_, err := c.Read(make([]byte, 8))
			return err
		}},
		{"peer reset", syscall.ECONNRESET, func(t *testing.T, c, peer net.Conn) error {
			require.NoError(t, peer.(*net.TCPConn).SetLinger(0))
			require.NoError(t, peer.Close())
			_, err := c.Read(make([]byte, 8))
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var shapes [2]string
			for i, wrap := range []bool{false, true} {
				c, peer := pair(t, false)
				if wrap {
					c = rawio.Wrap(c)
				}
				err := tc.run(t, c, peer)
				if tc.is == nil {
					require.NoError(t, err, "wrapped=%v", wrap)
				} else {
					require.ErrorIs(t, err, tc.is, "wrapped=%v", wrap)
				}
				shapes[i] = errorShape(c, err)
			}
			assert.Equal(t, shapes[0], shapes[1], "the wrapped connection fails as net's does")
		})
	}
}

// TestCloseUnblocksRead closes a connection while (or before) another goroutine reads
// from it: the read returns net.ErrClosed, not a hang.
func TestCloseUnblocksRead(t *testing.T) {
	c, _ := pair(t, true)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 8))
		errc <- err
	}()
	require.NoError(t, c.Close())
	assert.ErrorIs(t, <-errc, net.ErrClosed)
}

func TestZeroLength(t *testing.T) {
	c, _ := pair(t, true)
	n, err := c.Read(nil)
	assert.Zero(t, n)
	assert.NoError(t, err)
	n, err = c.Write(nil)
	assert.Zero(t, n)
	assert.NoError(t, err)
}

// TestConcurrent has two goroutines write and two read one wrapped connection at once
// (net.Conn allows it): every byte arrives, each Write's bytes contiguous.
func TestConcurrent(t *testing.T) {
	c, peer := pair(t, true)
	const writes, size = 200, 10 << 10
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			chunk := bytes.Repeat([]byte{byte('a' + g)}, size)
			for range writes {
				_, err := c.Write(chunk)
				assert.NoError(t, err)
			}
		})
	}
	got := make(chan []byte, 1)
	go func() {
		b, err := io.ReadAll(peer)
		assert.NoError(t, err)
		got <- b
	}()
	// The other direction: the peer writes and closes its side, two goroutines read
	// until EOF.
	back := bytes.Repeat([]byte("z"), writes*size)
	go func() {
		_, err := peer.Write(back)
		assert.NoError(t, err)
		assert.NoError(t, peer.(interface{ CloseWrite() error }).CloseWrite())
	}()
	var read atomic.Int64
	var rg sync.WaitGroup
	for range 2 {
		rg.Go(func() {
			buf := make([]byte, 4096)
			for {
				n, err := c.Read(buf)
				read.Add(int64(n))
				assert.Equal(t, bytes.Repeat([]byte("z"), n), buf[:n])
				if err != nil {
					assert.ErrorIs(t, err, io.EOF)
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, c.(interface{ CloseWrite() error }).CloseWrite())
	b := <-got
	require.Len(t, b, 2*writes*size)
	for i := 0; i < len(b); i += size {
		assert.Equal(t, bytes.Repeat(b[i:i+1], size), b[i:i+size], "a Write's bytes stay together")
	}
	rg.Wait()
	assert.Equal(t, int64(len(back)), read.Load())
}

// TestNoAllocs: a Read and a Write that succeed allocate nothing.
func TestNoAllocs(t *testing.T) {
	c, peer := pair(t, true)
	go func() { _, _ = io.Copy(peer, peer) }() // echo
	msg, buf := []byte("ping"), make([]byte, 4)
	allocs := testing.AllocsPerRun(200, func() {
		_, err := c.Write(msg)
		if err == nil {
			_, err = io.ReadFull(c, buf)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
	require.NoError(t, c.Close())
}

// BenchmarkPingPong is one 64-byte request and its echo over loopback per op, through a
// plain *net.TCPConn and through a wrapped one.
func BenchmarkPingPong(b *testing.B) {
	for _, wrap := range []bool{false, true} {
		name := "net"
		if wrap {
			name = "rawio"
		}
		b.Run(name, func(b *testing.B) {
			c, peer := pair(b, wrap)
			go func() { _, _ = io.Copy(peer, peer) }()
			msg, buf := make([]byte, 64), make([]byte, 64)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			_ = c.Close()
		})
	}
}
