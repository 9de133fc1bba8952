package h1_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// fuzzDeadline bounds one fuzzed exchange: the client half-closes after its bytes, so
// a server waiting for more sees EOF; one that neither answers nor closes within this
// hangs.
const fuzzDeadline = 3 * time.Second

// FuzzServe sends fuzzed bytes on a connection to h1.Server and to net/http's server,
// both serving confHandler. h1 must not panic (a panic outside the handler ends the
// process) nor hang: the connection is answered or closed within fuzzDeadline. Where
// both answer, the first final status has the same class. The seed corpus is the
// differential table.
func FuzzServe(f *testing.F) {
	for _, c := range confCases {
		if in := strings.Join(c.x.writes, ""); len(in) <= 16<<10 {
			f.Add([]byte(in))
		}
	}
	std, dut := startPair(f, confConfig{Handler: http.HandlerFunc(confHandler), MaxHeaderBytes: confMaxHeader})
	f.Fuzz(func(t *testing.T, in []byte) {
		want := fuzzSend(t, std.addr, in)
		got := fuzzSend(t, dut.addr, in)
		if got.hung {
			t.Fatalf("h1 neither answered nor closed within %v; read %q (net/http: status %d, read %q)",
				fuzzDeadline, trunc(string(got.raw), 300), want.status, trunc(string(want.raw), 300))
		}
		if want.status != 0 && got.status != 0 && want.status/100 != got.status/100 {
			t.Fatalf("first status: net/http %d, h1 %d\nnet/http read %q\nh1 read %q",
				want.status, got.status, trunc(string(want.raw), 300), trunc(string(got.raw), 300))
		}
	})
}

// fuzzAnswer is what a fuzzed exchange read.
type fuzzAnswer struct {
	raw    []byte
	status int  // the first final status, 0 when none could be parsed
	hung   bool // no close within fuzzDeadline
}

// fuzzSend writes in to addr, half-closes, and reads until the server closes.
func fuzzSend(t *testing.T, addr string, in []byte) fuzzAnswer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(fuzzDeadline))
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		if _, err := c.Write(in); err == nil {
			_ = c.(*net.TCPConn).CloseWrite()
		}
	}()
	raw, err := io.ReadAll(c)
	<-wrote
	a := fuzzAnswer{raw: raw}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		a.hung = true
	}
	br := bufio.NewReader(bytes.NewReader(raw))
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return a
		}
		_ = resp.Body.Close()
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			a.status = resp.StatusCode
			return a
		}
	}
}
