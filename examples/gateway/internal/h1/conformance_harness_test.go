package h1_test

// The differential harness: the same raw bytes on a raw TCP connection to net/http's
// server and to h1.Server, each answer parsed and reduced to a list of lines that say
// what a client, an attacker or a proxy in front sees (status, framing, headers but
// Date, body, trailers, whether the connection stays usable), then compared.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// confDeadline bounds every exchange: a server that neither answers nor closes within
// it is reported as "timeout" (a hang), never waited for longer.
const confDeadline = 5 * time.Second

// confProbe is the request sent after the expected answers to learn whether the
// connection is still usable (and what a next request on it would be served as).
const confProbe = "GET /probe HTTP/1.1\r\nHost: probe\r\n\r\n"

// confLog collects a server's ErrorLog so that test output stays readable and tests
// can look for a logged panic.
type confLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *confLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *confLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// confServed is one running server under test.
type confServed struct {
	name string
	addr string
	srv  confServer
	log  *confLog
	done chan error // Serve's result
}

// startConf serves cfg with mk on a loopback port; the test's cleanup closes the
// server and checks that Serve returned http.ErrServerClosed.
func startConf(t testing.TB, name string, mk func(confConfig) confServer, cfg confConfig) *confServed {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &confServed{name: name, addr: ln.Addr().String(), log: &confLog{}, done: make(chan error, 1)}
	if cfg.ErrorLog == nil {
		cfg.ErrorLog = log.New(s.log, "", 0)
	}
	s.srv = mk(cfg)
	go func() { s.done <- s.srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = s.srv.Close()
		select {
		case err := <-s.done:
			if !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("%s: Serve returned %v, want http.ErrServerClosed", name, err)
			}
		case <-time.After(confDeadline):
			t.Errorf("%s: Serve did not return after Close", name)
			return
		}
		if w, ok := s.srv.(interface{ wait() }); ok {
			waited := make(chan struct{})
			go func() { w.wait(); close(waited) }()
			select {
			case <-waited:
			case <-time.After(confDeadline):
				t.Errorf("%s: connections still served %v after Close", name, confDeadline)
			}
		}
	})
	return s
}

// startPair serves cfg on both servers.
func startPair(t testing.TB, cfg confConfig) (std, dut *confServed) {
	t.Helper()
	return startConf(t, "net/http", newStd, cfg), startConf(t, "h1", newH1, cfg)
}

// confExchange is what one case sends: writes in order (each write after the first
// waits until the previous one got an answer, 1xx included: a client waiting for
// "100 Continue" or for the answer before its next request), and how many final
// (non-1xx) answers to read before probing the connection, with the method of each
// request (HEAD answers have no body).
type confExchange struct {
	writes  []string
	finals  int      // 0 means 1
	methods []string // per final answer; missing means GET
}

// confResult is one server's answer to an exchange.
type confResult struct {
	lines []string // the comparison
	raw   []byte   // every byte read, for the failure message
}

// exchange sends x to addr and reduces the answer to lines.
func exchange(t testing.TB, addr string, x confExchange) confResult {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(confDeadline))

	answered := make(chan struct{}, 16)
	wrote := make(chan struct{})
	stop := make(chan struct{})
	defer func() { close(stop); _ = c.Close(); <-wrote }() // the close ends a blocked write
	go func() {                                            // writes run apart from reads: a server may answer before reading all
		defer close(wrote)
		for i, w := range x.writes {
			if i > 0 {
				select {
				case <-answered:
				case <-stop:
					return
				}
			}
			if _, err := io.WriteString(c, w); err != nil {
				return // the server closed; what it answered is what counts
			}
		}
	}()

	var raw bytes.Buffer
	br := bufio.NewReader(io.TeeReader(c, &raw))
	var lines []string
	finals := max(x.finals, 1)
	got, closing := 0, false
	for got < finals {
		method := "GET"
		if got < len(x.methods) && x.methods[got] != "" {
			method = x.methods[got]
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			lines = append(lines, "no answer: "+readErr(err))
			return confResult{lines: lines, raw: raw.Bytes()}
		}
		lines = append(lines, describe(resp))
		select {
		case answered <- struct{}{}:
		default:
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			got++
			closing = resp.Close
			if closing {
				break
			}
		}
	}
	switch {
	case closing: // the server said Connection: close: it must close
		_ = c.SetReadDeadline(time.Now().Add(confDeadline))
		if b, err := br.ReadByte(); err == nil {
			lines = append(lines, fmt.Sprintf("after close: byte %q", b))
		} else {
			lines = append(lines, "after close: "+readErr(err))
		}
	default:
		_, werr := io.WriteString(c, confProbe)
		resp, err := http.ReadResponse(br, nil)
		switch {
		case err != nil:
			lines = append(lines, fmt.Sprintf("probe: %s (write error %v)", readErr(err), werr != nil))
		default:
			d := describe(resp)
			if strings.Contains(d, `body="GET /probe `) {
				lines = append(lines, "probe: served")
			} else {
				lines = append(lines, "probe answered: "+d)
			}
		}
	}
	return confResult{lines: lines, raw: raw.Bytes()}
}

// readErr names a read error the same way on both sides: a clean EOF and a reset
// both mean the server closed (which of the two a client sees depends on timing).
func readErr(err error) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated"
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), isReset(err):
		return "closed"
	default:
		return "error: " + err.Error()
	}
}

func isReset(err error) bool {
	s := err.Error()
	return strings.Contains(s, "connection reset") || strings.Contains(s, "broken pipe")
}

// describe reduces one response to a line. A response the handler wrote (it carries
// X-Handler) is described in full but Date's value: status, protocol, framing, headers,
// body (a digest when long), trailers. A response the server wrote by itself (an error
// before the handler, 100 Continue) is described by status and Connection only: the
// text and framing of a server's error body are not compared.
func describe(resp *http.Response) string {
	defer resp.Body.Close()
	body, berr := io.ReadAll(resp.Body)
	if resp.Header.Get("X-Handler") == "" {
		return fmt.Sprintf("%d (server) connection=%q", resp.StatusCode, strings.ToLower(resp.Header.Get("Connection")))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d framing=%s", resp.Proto, resp.StatusCode, framing(resp))
	keys := make([]string, 0, len(resp.Header))
	for k := range resp.Header {
		if k != "Content-Length" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "Date" { // its value changes every second: present is what counts
			b.WriteString(" Date=set")
			continue
		}
		fmt.Fprintf(&b, " %s=%q", k, strings.Join(resp.Header[k], ","))
	}
	if len(body) > 512 {
		fmt.Fprintf(&b, " body=%d bytes sha256 %x", len(body), sha256.Sum256(body))
	} else {
		fmt.Fprintf(&b, " body=%q", body)
	}
	if berr != nil {
		fmt.Fprintf(&b, " body-error=%s", readErr(berr))
	}
	if len(resp.Trailer) > 0 {
		tk := make([]string, 0, len(resp.Trailer))
		for k, v := range resp.Trailer {
			tk = append(tk, k+"="+strings.Join(v, ","))
		}
		sort.Strings(tk)
		fmt.Fprintf(&b, " trailers=%s", strings.Join(tk, ";"))
	}
	return b.String()
}

// framing names how a response delimits its body.
func framing(resp *http.Response) string {
	switch {
	case slices.Contains(resp.TransferEncoding, "chunked"):
		return "chunked"
	case resp.Header.Get("Content-Length") != "":
		return "length=" + resp.Header.Get("Content-Length")
	case resp.StatusCode/100 == 1 || resp.StatusCode == 204 || resp.StatusCode == 304 ||
		(resp.Request != nil && resp.Request.Method == http.MethodHead):
		return "none"
	default:
		return "close"
	}
}

// confContext is the deadline for tests that wait on a server (never a sleep).
func confContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), confDeadline)
	t.Cleanup(cancel)
	return ctx
}
