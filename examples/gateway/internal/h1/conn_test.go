package h1_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentserve/sessionaffinity/examples/gateway/internal/h1"
)

// echo answers the method, host, URL and body it got.
func echo(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	fmt.Fprintf(w, "%s %s %s %s", r.Method, r.Host, r.RequestURI, b)
}

// TestRejected: requests net/http's server answers itself get the same answer, and
// the connection closes.
func TestRejected(t *testing.T) {
	addr, _ := serve(t, &h1.Server{Handler: http.HandlerFunc(echo), MaxHeaderBytes: 1000})
	big := strings.Repeat("a", 6000)
	for _, tc := range []struct {
		name, req, want string
	}{
		{"no Host on HTTP/1.1", "GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request: missing required Host header"},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n"},
		{"malformed Host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", "HTTP/1.1 400 Bad Request: malformed Host header"},
		{"absolute-form without a Host header", "GET http://x/ HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request: missing required Host header"},
		{"invalid header value", "GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n", "HTTP/1.1 400 Bad Request"},
		{"malformed request line", "GET\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n"},
		{"HTTP/3.0", "GET / HTTP/3.0\r\nHost: a\r\n\r\n", "HTTP/1.1 505 HTTP Version Not Supported: unsupported protocol version"},
		{"HTTP/0.9", "GET / HTTP/0.9\r\nHost: a\r\n\r\n", "HTTP/1.1 505 HTTP Version Not Supported"},
		{"unsupported Transfer-Encoding", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", "HTTP/1.1 501 Not Implemented"},
		{"header over MaxHeaderBytes + 4096", "GET / HTTP/1.1\r\nHost: a\r\nX: " + big + "\r\n\r\n", "HTTP/1.1 431 Request Header Fields Too Large"},
		{"Expect other than 100-continue", "POST / HTTP/1.1\r\nHost: a\r\nExpect: x\r\nContent-Length: 1\r\n\r\nx", "HTTP/1.1 417 Expectation Failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := dial(t, addr)
			cl.send(tc.req)
			got := cl.raw()
			if !strings.HasPrefix(got, tc.want) {
				t.Fatalf("got %q, want it to start with %q", got, tc.want)
			}
			if !strings.Contains(got, "Connection: close\r\n") {
				t.Errorf("got %q, want Connection: close", got)
			}
		})
	}
}

// TestAccepted: requests that reach the handler, and what it sees.
func TestAccepted(t *testing.T) {
	addr, _ := serve(t, &h1.Server{Handler: http.HandlerFunc(echo), MaxHeaderBytes: 1000})
	for _, tc := range []struct {
		name, req, method, want string
		status                  int
	}{
		{"origin-form", "GET /a?b HTTP/1.1\r\nHost: h\r\n\r\n", "GET", "GET h /a?b ", 200},
		{"HTTP/1.0 without Host", "GET / HTTP/1.0\r\n\r\n", "GET", "GET  / ", 200},
		{"empty Host", "GET / HTTP/1.1\r\nHost:\r\n\r\n", "GET", "GET  / ", 200},
		{"host header in any case", "GET / HTTP/1.1\r\nhOsT: h\r\n\r\n", "GET", "GET h / ", 200},
		{"absolute-form", "GET http://u/p HTTP/1.1\r\nHost: h\r\n\r\n", "GET", "GET u http://u/p ", 200},
		{"CONNECT without Host", "CONNECT example.com:443 HTTP/1.1\r\n\r\n", "CONNECT", "CONNECT example.com:443 example.com:443 ", 200},
		{"header just under the limit", "GET / HTTP/1.1\r\nHost: h\r\nX: " + strings.Repeat("a", 4500) + "\r\n\r\n", "GET", "GET h / ", 200},
		{"chunked body", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "POST", "POST h / abc", 200},
		{"OPTIONS *", "OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n", "OPTIONS", "", 200},
		{"HTTP/2 preface: to the handler", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "PRI", "PRI  * ", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := dial(t, addr)
			cl.send(tc.req)
			resp, body := cl.response(tc.method)
			if resp.StatusCode != tc.status || body != tc.want {
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, body, tc.status, tc.want)
			}
		})
	}
}

// TestKeepAlive: which connections stay open after a response.
func TestKeepAlive(t *testing.T) {
	addr, _ := serve(t, &h1.Server{Handler: http.HandlerFunc(echo)})
	for _, tc := range []struct {
		name, req string
		open      bool
		conn      string // the response's Connection header
	}{
		{"HTTP/1.1", "GET / HTTP/1.1\r\nHost: h\r\n\r\n", true, ""},
		{"HTTP/1.1 Connection: close", "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", false, "close"},
		{"HTTP/1.0", "GET / HTTP/1.0\r\n\r\n", false, "close"},
		{"HTTP/1.0 keep-alive", "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true, "keep-alive"},
		{"unread small body", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := dial(t, addr)
			cl.send(tc.req)
			resp, _ := cl.response("GET")
			got := resp.Header.Get("Connection")
			if resp.Close { // http.ReadResponse removes Connection: close
				got = "close"
			}
			if got != tc.conn {
				t.Errorf("Connection: %q, want %q", got, tc.conn)
			}
			if !tc.open {
				if !cl.closed() {
					t.Error("connection not closed")
				}
				return
			}
			cl.send("GET /again HTTP/1.1\r\nHost: h\r\n\r\n")
			if _, body := cl.response("GET"); body != "GET h /again " {
				t.Errorf("second request: %q", body)
			}
		})
	}
}

// TestPipelined: requests sent together are answered in order.
func TestPipelined(t *testing.T) {
	addr, _ := serve(t, &h1.Server{Handler: http.HandlerFunc(echo)})
	cl := dial(t, addr)
	cl.send("POST /1 HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\nxGET /2 HTTP/1.1\r\nHost: h\r\n\r\nGET /3 HTTP/1.1\r\nHost: h\r\n\r\n")
	for _, want := range []string{"POST h /1 x", "GET h /2 ", "GET h /3 "} {
		if _, body := cl.response("GET"); body != want {
			t.Errorf("got %q, want %q", body, want)
		}
	}
}

// TestUnreadBody: a body the handler leaves is discarded up to 256 KiB; more closes
// the connection after a Connection: close answer.
func TestUnreadBody(t *testing.T) {
	addr, _ := serve(t, &h1.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})})
	for _, tc := range []struct {
		name string
		size int
		open bool
	}{{"small", 1000, true}, {"256 KiB less one", 256<<10 - 1, true}, {"large", 300 << 10, false}} {
		t.Run(tc.name, func(t *testing.T) {
			cl := dial(t, addr)
			go cl.send(fmt.Sprintf("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n%s", tc.size, strings.Repeat("b", tc.size)))
			resp, _ := cl.response("POST")
			if resp.Close == tc.open {
				t.Errorf("Connection: close %v, want %v", resp.Close, !tc.open)
			}
			if tc.open {
				cl.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
				if _, body := cl.response("GET"); body != "ok" {
					t.Errorf("second request: %q", body)
				}
			}
		})
	}
}

// TestExpectContinue: 100 Continue is written at the body's first read, not before.
func TestExpectContinue(t *testing.T) {
	addr, _ := serve(t, &h1.Server{Handler: http.HandlerFunc(echo)})
	cl := dial(t, addr)
	cl.send("POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
	line, err := cl.br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("got %q %v, want 100 Continue", line, err)
	}
	if blank, _ := cl.br.ReadString('\n'); blank != "\r\n" {
		t.Fatalf("got %q after the 100", blank)
	}
	cl.send("abc")
	if _, body := cl.response("POST"); body != "POST h / abc" {
		t.Errorf("got %q", body)
	}
}

// TestH1ConfFindings: the cases h1conf's differential suite found (F2-F4, F6, F7).
func TestH1ConfFindings(t *testing.T) {
	addr, _ := serve(t, &h1.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/trailer":
			io.ReadAll(r.Body)
			fmt.Fprintf(w, "%v", r.Trailer)
		case "/flush-then-read":
			io.WriteString(w, "head ")
			w.(http.Flusher).Flush()
			b, err := io.ReadAll(r.Body)
			fmt.Fprintf(w, "read %q err %v", b, err)
		case "/badcl":
			w.Header().Set("Content-Length", "abc")
			io.WriteString(w, "body")
		default:
			io.WriteString(w, r.Host)
		}
	})})
	for _, tc := range []struct {
		name, req, want string
		open            bool
	}{
		{"F2 obs-folded Host, HTTP/1.1", "GET / HTTP/1.1\r\nHost: a\r\n b\r\n\r\n", "HTTP/1.1 400 Bad Request: malformed Host header", false},
		{"F2 obs-folded Host, HTTP/1.0", "GET / HTTP/1.0\nHost:\n \"\n\n", "HTTP/1.1 400 Bad Request: malformed Host header", false},
		{"F3 undeclared trailer", "POST /trailer HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Tr: v\r\n\r\n", "map[X-Tr:[v]]", true},
		{"F4 invalid Content-Length: chunked", "GET /badcl HTTP/1.1\r\nHost: h\r\n\r\n", "Transfer-Encoding: chunked", true},
		{"F7 a body read after the header was written", "POST /flush-then-read HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\ndata", "read \"\" err http: invalid Read on closed Body", true},
		{"F6 PRI with a Host header is no preface", "PRI * HTTP/2.0\r\nHost: a\r\n\r\n", "HTTP/1.1 200 OK", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := dial(t, addr)
			cl.send(tc.req)
			if !tc.open {
				if got := cl.raw(); !strings.HasPrefix(got, tc.want) {
					t.Errorf("got %q, want %q", got, tc.want)
				}
				return
			}
			cl.c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			b := make([]byte, 4096)
			n, _ := io.ReadAtLeast(cl.br, b, 1)
			for !strings.Contains(string(b[:n]), "\r\n0\r\n") && !strings.Contains(string(b[:n]), tc.want) {
				m, err := cl.br.Read(b[n:])
				if err != nil {
					break
				}
				n += m
			}
			if got := string(b[:n]); !strings.Contains(got, tc.want) || strings.Contains(got, "Connection: close") {
				t.Errorf("got %q, want %q and the connection kept", got, tc.want)
			}
		})
	}
}
