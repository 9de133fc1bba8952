package rawio_test

import (
	"bytes"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway/internal/rawio"
)

// Deadlines of a wrapped connection move the poller's timer only when they come
// earlier; these tests check that what callers see is still net's: a deadline moved
// later or cleared is not hit at the earlier time, an earlier one interrupts a blocked
// call, and splice-based copies (ReadFrom, WriteTo), which do not absorb an early
// wake-up, never see one. They use the real clock (the kernel's poller cannot be
// driven by a fake one) with margins of tens of milliseconds.

const (
	early = 30 * time.Millisecond  // the deadline armed first
	late  = 150 * time.Millisecond // the deadline set after it
)

// TestDeadlineMovedLater: a Read or Write blocked past the first deadline, which was
// moved later (or cleared) before it passed, fails only at the later one (or not at
// all: the peer's bytes, sent after the first deadline, arrive).
func TestDeadlineMovedLater(t *testing.T) {
	cases := []struct {
		name  string
		write bool
		next  func() time.Time // the second deadline: zero clears it
	}{
		{"read, later", false, func() time.Time { return time.Now().Add(late) }},
		{"read, cleared", false, func() time.Time { return time.Time{} }},
		{"write, later", true, func() time.Time { return time.Now().Add(late) }},
		{"write, cleared", true, func() time.Time { return time.Time{} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, wrap := range []bool{false, true} {
				c, peer := pair(t, false)
				if wrap {
					c = rawio.Wrap(c)
				}
				set := c.SetReadDeadline
				if tc.write {
					set = c.SetWriteDeadline
				}
				require.NoError(t, set(time.Now().Add(early)))
				next := tc.next()
				require.NoError(t, set(next))
				start := time.Now()
				if tc.write {
					checkWrite(t, c, peer, next, wrap)
				} else {
					checkRead(t, c, peer, next, start, wrap)
				}
			}
		})
	}
}

// checkRead reads from c while the peer writes one byte at 2*late: with a deadline
// the read fails at it, without one the byte arrives.
func checkRead(t *testing.T, c, peer net.Conn, deadline, start time.Time, wrap bool) {
	timer := time.AfterFunc(2*late, func() { _, _ = peer.Write([]byte("x")) })
	defer timer.Stop()
	n, err := c.Read(make([]byte, 8))
	if deadline.IsZero() {
		require.NoError(t, err, "wrapped=%v", wrap)
		assert.Equal(t, 1, n)
		assert.GreaterOrEqual(t, time.Since(start), 2*late-5*time.Millisecond, "wrapped=%v: the byte, not an early timeout", wrap)
		return
	}
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "wrapped=%v", wrap)
	assert.False(t, time.Now().Before(deadline), "wrapped=%v: failed %v before its deadline", wrap, time.Until(deadline))
}

// checkWrite writes 16 MiB to c, more than the socket buffers hold, while the peer
// starts reading at 2*late: with a deadline the write fails at it having written
// part, without one everything arrives.
func checkWrite(t *testing.T, c, peer net.Conn, deadline time.Time, wrap bool) {
	var got int64
	var wg sync.WaitGroup
	gate := make(chan struct{})
	timer := time.AfterFunc(2*late, func() { close(gate) })
	defer timer.Stop()
	wg.Go(func() {
		<-gate
		got, _ = io.Copy(io.Discard, peer)
	})
	data := bytes.Repeat([]byte("w"), 16<<20)
	n, err := c.Write(data)
	if deadline.IsZero() {
		require.NoError(t, err, "wrapped=%v", wrap)
		assert.Equal(t, len(data), n)
		require.NoError(t, c.Close())
		wg.Wait()
		assert.Equal(t, int64(len(data)), got)
		return
	}
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "wrapped=%v", wrap)
	assert.Less(t, n, len(data))
	assert.False(t, time.Now().Before(deadline), "wrapped=%v: failed %v before its deadline", wrap, time.Until(deadline))
	require.NoError(t, c.Close())
	<-gate
	wg.Wait()
	assert.Equal(t, int64(n), got, "the bytes Write reports written arrived")
}

// TestDeadlineMovedEarlier: a deadline set earlier than the armed one, from another
// goroutine while a Read blocks, interrupts it at once.
func TestDeadlineMovedEarlier(t *testing.T) {
	c, _ := pair(t, true)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Hour)))
	errc := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 8))
		errc <- err
	}()
	timer := time.AfterFunc(early, func() { _ = c.SetReadDeadline(time.Unix(1, 0)) })
	defer timer.Stop()
	select {
	case err := <-errc:
		assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	case <-time.After(10 * time.Second):
		t.Fatal("a past deadline did not interrupt the blocked Read")
	}
}

// TestDeadlineCopies: io.Copy into and out of a wrapped connection (its ReadFrom and
// WriteTo, net's own) runs past a deadline that was armed and then cleared.
func TestDeadlineCopies(t *testing.T) {
	for _, into := range []bool{true, false} {
		name := "WriteTo"
		if into {
			name = "ReadFrom"
		}
		t.Run(name, func(t *testing.T) {
			c, peer := pair(t, true)
			require.NoError(t, c.SetDeadline(time.Now().Add(early)))
			require.NoError(t, c.SetDeadline(time.Time{}))
			data := bytes.Repeat([]byte("c"), 1<<20)
			gate := make(chan struct{})
			timer := time.AfterFunc(2*late, func() { close(gate) })
			defer timer.Stop()
			var got int64
			var err error
			if into { // c.ReadFrom(src): src gives its bytes after the armed deadline
				var wg sync.WaitGroup
				wg.Go(func() { got, _ = io.Copy(io.Discard, peer) })
				src := struct{ io.Reader }{io.MultiReader(gateReader{gate}, bytes.NewReader(data))} // no WriterTo: io.Copy calls c.ReadFrom
				_, err = io.Copy(c, src)
				require.NoError(t, c.Close())
				wg.Wait()
			} else { // c.WriteTo(dst): the peer sends after the armed deadline
				go func() {
					<-gate
					_, _ = peer.Write(data)
					_ = peer.Close()
				}()
				got, err = io.Copy(io.Discard, c)
			}
			require.NoError(t, err)
			assert.Equal(t, int64(len(data)), got)
		})
	}
}

// gateReader returns EOF once its channel is closed (an io.MultiReader part that
// holds the rest back until then).
type gateReader struct{ gate chan struct{} }

func (g gateReader) Read([]byte) (int, error) {
	<-g.gate
	return 0, io.EOF
}

// TestDeadlineNoAllocs: moving a deadline later, clearing it and setting it again
// allocates nothing.
func TestDeadlineNoAllocs(t *testing.T) {
	c, _ := pair(t, true)
	base := time.Now().Add(time.Hour)
	i := 0
	allocs := testing.AllocsPerRun(200, func() {
		i++
		if err := c.SetReadDeadline(base.Add(time.Duration(i) * time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := c.SetReadDeadline(time.Time{}); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}
