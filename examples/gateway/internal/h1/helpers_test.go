package h1_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentserve/sessionaffinity/examples/gateway/internal/h1"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// logBuf is a concurrency-safe log sink.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// serve starts s (its ErrorLog set to the returned buffer when nil) on a loopback
// listener and returns the address; cleanup shuts it down and checks Serve's result.
func serve(t *testing.T, s *h1.Server) (string, *logBuf) {
	t.Helper()
	lb := &logBuf{}
	if s.ErrorLog == nil {
		s.ErrorLog = log.New(lb, "", 0)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ln) }()
	t.Cleanup(func() {
		_ = s.Close()
		if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v, want http.ErrServerClosed", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown after Close: %v", err)
		}
	})
	return ln.Addr().String(), lb
}

// client is a raw connection to the server.
type client struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { c.Close() })
	return &client{t: t, c: c, br: bufio.NewReader(c)}
}

func (cl *client) send(s string) {
	cl.t.Helper()
	if _, err := io.WriteString(cl.c, s); err != nil {
		cl.t.Fatal(err)
	}
}

// response reads one response (to a request of method) with its body.
func (cl *client) response(method string) (*http.Response, string) {
	cl.t.Helper()
	resp, err := http.ReadResponse(cl.br, &http.Request{Method: method})
	if err != nil {
		cl.t.Fatalf("reading the response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		cl.t.Fatalf("reading the response body: %v", err)
	}
	return resp, string(b)
}

// closed reports whether the server closed the connection (EOF, nothing more).
func (cl *client) closed() bool {
	cl.t.Helper()
	b, err := cl.br.ReadByte()
	if err == nil {
		cl.t.Errorf("read %q, want the connection closed", b)
		return false
	}
	return errors.Is(err, io.EOF) || strings.Contains(err.Error(), "reset")
}

// raw reads everything until the server closes.
func (cl *client) raw() string {
	cl.t.Helper()
	b, err := io.ReadAll(cl.br)
	if err != nil && !strings.Contains(err.Error(), "reset") {
		cl.t.Fatalf("reading: %v", err)
	}
	return string(b)
}
