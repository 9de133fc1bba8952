package h1_test

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/agentserve/sessionaffinity/examples/gateway/internal/h1"
)

// TestFraming: how a response is framed, by what the handler does.
func TestFraming(t *testing.T) {
	small := strings.Repeat("s", 2048)
	large := strings.Repeat("l", 2049)
	for _, tc := range []struct {
		name    string
		h       http.HandlerFunc
		method  string
		proto   string // "1.0" or "" (1.1)
		cl      string // Content-Length header, "" none
		chunked bool
		body    string
		ctype   string
		close   bool
	}{
		{name: "small body: Content-Length", h: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, small) },
			cl: "2048", body: small, ctype: "text/plain; charset=utf-8"},
		{name: "empty: Content-Length 0", h: func(w http.ResponseWriter, r *http.Request) {}, cl: "0"},
		{name: "body over the buffer: chunked", h: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, large) },
			chunked: true, body: large, ctype: "text/plain; charset=utf-8"},
		{name: "two writes over the buffer: chunked", h: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, small[:1500])
			io.WriteString(w, small[:1500])
		}, chunked: true, body: small[:1500] + small[:1500], ctype: "text/plain; charset=utf-8"},
		{name: "flushed: chunked", h: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "<html>")
			w.(http.Flusher).Flush()
			io.WriteString(w, "x")
		}, chunked: true, body: "<html>x", ctype: "text/html; charset=utf-8"},
		{name: "declared length kept", h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "5000")
			io.WriteString(w, strings.Repeat("d", 5000))
		}, cl: "5000", body: strings.Repeat("d", 5000), ctype: "text/plain; charset=utf-8"},
		{name: "declared type kept", h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, "{}")
		}, cl: "2", body: "{}", ctype: "application/json"},
		{name: "no sniffing with Content-Encoding", h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			io.WriteString(w, "zz")
		}, cl: "2", body: "zz"},
		{name: "HTTP/1.0 large: close-delimited", proto: "1.0", h: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, large) },
			body: large, ctype: "text/plain; charset=utf-8", close: true},
		{name: "Transfer-Encoding identity: close-delimited", h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Transfer-Encoding", "identity")
			w.(http.Flusher).Flush()
			io.WriteString(w, "i")
		}, body: "i", close: true},
		{name: "HEAD: length, no body", method: "HEAD", h: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "abc") },
			cl: "3", ctype: "text/plain; charset=utf-8"},
		{name: "204: no body, no length", h: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(204)
			if _, err := io.WriteString(w, "x"); !errors.Is(err, http.ErrBodyNotAllowed) {
				panic(err)
			}
		}},
		{name: "304: no type, no length", h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(304)
		}},
		{name: "trailers: chunked", h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-T")
			io.WriteString(w, "t")
			w.Header().Set("X-T", "v")
			w.Header().Set(http.TrailerPrefix+"X-U", "u")
		}, chunked: true, body: "t", ctype: "text/plain; charset=utf-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, _ := serve(t, &h1.Server{Handler: tc.h})
			cl := dial(t, addr)
			method := tc.method
			if method == "" {
				method = "GET"
			}
			if tc.proto == "1.0" {
				cl.send(method + " / HTTP/1.0\r\n\r\n")
			} else {
				cl.send(method + " / HTTP/1.1\r\nHost: h\r\n\r\n")
			}
			resp, body := cl.response(method)
			if got := resp.Header.Get("Content-Length"); got != tc.cl {
				t.Errorf("Content-Length %q, want %q", got, tc.cl)
			}
			if got := len(resp.TransferEncoding) > 0; got != tc.chunked {
				t.Errorf("chunked %v, want %v", got, tc.chunked)
			}
			if body != tc.body {
				t.Errorf("body %d bytes, want %d", len(body), len(tc.body))
			}
			if got := resp.Header.Get("Content-Type"); got != tc.ctype {
				t.Errorf("Content-Type %q, want %q", got, tc.ctype)
			}
			if resp.Header.Get("Date") == "" {
				t.Error("no Date")
			}
			if resp.Close != tc.close {
				t.Errorf("close %v, want %v", resp.Close, tc.close)
			}
			if tc.name == "trailers: chunked" {
				if resp.Trailer.Get("X-T") != "v" || resp.Trailer.Get("X-U") != "u" {
					t.Errorf("trailers %v", resp.Trailer)
				}
			}
		})
	}
}

// TestContentLengthEnforced: a Write past the declared length fails; a short body
// closes the connection.
func TestContentLengthEnforced(t *testing.T) {
	errc := make(chan error, 1)
	addr, _ := serve(t, &h1.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "3")
		io.WriteString(w, "ab")
		_, err := io.WriteString(w, "cd")
		errc <- err
	})})
	cl := dial(t, addr)
	cl.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, err := http.ReadResponse(cl.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "ab" {
		t.Errorf("body %q", b)
	}
	if err := <-errc; !errors.Is(err, http.ErrContentLength) {
		t.Errorf("second write: %v, want http.ErrContentLength", err)
	}
	if !cl.closed() {
		t.Error("connection kept")
	}
}

// TestInformational: a 103 is written at once with the headers so far, which stay.
func TestInformational(t *testing.T) {
	addr, _ := serve(t, &h1.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</a>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		io.WriteString(w, "final")
	})})
	cl := dial(t, addr)
	cl.send("GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	early, err := http.ReadResponse(cl.br, nil)
	if err != nil || early.StatusCode != 103 || early.Header.Get("Link") == "" {
		t.Fatalf("got %v %v, want a 103 with Link", early, err)
	}
	resp, body := cl.response("GET")
	if resp.StatusCode != 200 || body != "final" || resp.Header.Get("Link") == "" {
		t.Errorf("got %d %q Link %q", resp.StatusCode, body, resp.Header.Get("Link"))
	}
}

// TestHijack: the hijacker gets the connection and the bytes already read; writes
// through the ResponseWriter fail with http.ErrHijacked.
func TestHijack(t *testing.T) {
	addr, _ := serve(t, &h1.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		defer c.Close()
		if _, err := w.Write([]byte("x")); !errors.Is(err, http.ErrHijacked) {
			panic(err)
		}
		line, _ := brw.ReadString('\n')
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\n\r\necho " + line)
		brw.Flush()
	})})
	cl := dial(t, addr)
	cl.send("GET / HTTP/1.1\r\nHost: h\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\nhello\n")
	resp, err := http.ReadResponse(cl.br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("got %v %v", resp, err)
	}
	if rest, _ := bufio.NewReader(cl.br).ReadString('\n'); rest != "echo hello\n" {
		t.Errorf("got %q", rest)
	}
}
