package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rawBackend is a TCP backend that reads one request's headers (not its body) and
// then runs answer on the connection, which it closes afterwards; it returns the URL.
func rawBackend(t *testing.T, answer func(w *bufio.Writer)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				tp := textproto.NewReader(bufio.NewReader(c))
				if _, err := tp.ReadLine(); err != nil {
					return
				}
				if _, err := tp.ReadMIMEHeader(); err != nil {
					return
				}
				w := bufio.NewWriter(c)
				answer(w)
				_ = w.Flush()
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	return "http://" + ln.Addr().String()
}

// TestDirectTransportResponseLimits checks the header-size and 1xx bounds of the
// direct backend client (the figures net/http.Transport uses, see maxResponseHeaderBytes).
func TestDirectTransportResponseLimits(t *testing.T) {
	headers := func(n int) func(w *bufio.Writer) { // a 200 with about n bytes of header fields
		return func(w *bufio.Writer) {
			_, _ = io.WriteString(w, "HTTP/1.1 200 OK\r\n")
			line := "X-Pad: " + strings.Repeat("a", 1000) + "\r\n"
			for i := 0; i < n; i += len(line) {
				if _, err := io.WriteString(w, line); err != nil {
					return // the client gave up
				}
			}
			_, _ = io.WriteString(w, "Content-Length: 2\r\n\r\nok")
		}
	}
	informational := func(n int) func(w *bufio.Writer) { // n 103 Early Hints, then a 200
		return func(w *bufio.Writer) {
			for range n {
				if _, err := io.WriteString(w, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"); err != nil {
					return
				}
			}
			_, _ = io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	}
	for _, tc := range []struct {
		name     string
		answer   func(w *bufio.Writer)
		hook     bool
		wantErr  string // "" for a 200 "ok"
		want1xx  int    // informational responses the hook saw
		sentinel error
	}{
		{name: "headers under 10 MiB", answer: headers(9 << 20)},
		{name: "headers over 10 MiB", answer: headers(11 << 20), wantErr: "exceeded 10485760 bytes", sentinel: errHeaderBudget},
		{name: "103 forwarded to the hook", answer: informational(3), hook: true, want1xx: 3},
		{name: "103 skipped without a hook", answer: informational(3)},
		{name: "too many 1xx with a hook", answer: informational(max1xxResponses + 1), hook: true, want1xx: max1xxResponses, wantErr: "more than 100 informational"},
		{name: "too many 1xx without a hook", answer: informational(max1xxResponses + 1), wantErr: "more than 100 informational"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := rawBackend(t, tc.answer)
			tr := newTestDirect(t)
			var got1xx []int
			ctx := context.Background()
			if tc.hook {
				ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
					Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
						got1xx = append(got1xx, code)
						assert.Equal(t, "</a.css>; rel=preload", h.Get("Link"))
						return nil
					},
				})
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			assert.Len(t, got1xx, tc.want1xx)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				if tc.sentinel != nil {
					assert.ErrorIs(t, err, tc.sentinel)
				}
				status, _ := proxyStatus(err)
				assert.Equal(t, http.StatusBadGateway, status)
				return
			}
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, "ok", string(body))
		})
	}
}

// zeros is an endless request body.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestDirectTransportEarlyResponse: a backend that answers before reading a large
// request body and closes the connection (the write fails with EPIPE/ECONNRESET) has
// its response forwarded, as net/http.Transport does; with no response the write
// error stands.
func TestDirectTransportEarlyResponse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer string // written by the backend before it closes; "" = none
	}{
		{name: "401 before the body", answer: "HTTP/1.1 401 Unauthorized\r\nConnection: close\r\nContent-Length: 5\r\n\r\nnope!"},
		{name: "413 without Connection: close", answer: "HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: 5\r\n\r\nnope!"},
		{name: "closed without a response"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := rawBackend(t, func(w *bufio.Writer) { _, _ = io.WriteString(w, tc.answer) })
			tr := newTestDirect(t)
			req, err := http.NewRequest(http.MethodPost, url, io.LimitReader(zeros{}, 256<<20))
			require.NoError(t, err)
			req.ContentLength = 256 << 20
			resp, err := tr.RoundTrip(req)
			if tc.answer == "" {
				require.Error(t, err)
				// net/http's Request.Write hides the cause's type (retry rules see what they saw before)
				assert.Regexp(t, "write: (connection reset by peer|broken pipe)", err.Error(), "the write error stands")
				return
			}
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			assert.Equal(t, "nope!", string(body))
			assert.Contains(t, tc.answer, fmt.Sprint(resp.StatusCode))
			tr.mu.Lock()
			defer tr.mu.Unlock()
			for _, p := range tr.pools {
				assert.Empty(t, p.idle, "a connection whose request write failed is never reused")
			}
		})
	}
}

// TestBackendClientsAgreeOnAdversarialBackends runs both backend clients through a
// gateway against backends that send oversized headers, Early Hints, or answer before
// reading the request body: the client sees the same status from both.
func TestBackendClientsAgreeOnAdversarialBackends(t *testing.T) {
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a", 8<<20) + `"}]}`
	for _, tc := range []struct {
		name       string
		answer     func(w *bufio.Writer)
		body       string
		wantStatus int
		want103    int
		// orBadGateway: with nethttp, net/http.Transport returns the early 401 only when
		// its read goroutine wins the race with the failed write (502 otherwise); direct
		// reads the response every time. The nethttp run still checks, under -race, that
		// the Transport's write goroutine, which may read the request body after
		// RoundTrip returned, shares no state with the gateway's handler.
		orBadGateway bool
	}{
		{name: "11 MiB of headers", answer: func(w *bufio.Writer) {
			_, _ = io.WriteString(w, "HTTP/1.1 200 OK\r\n")
			for i := 0; i < 11<<10; i++ {
				if _, err := io.WriteString(w, "X-Pad: "+strings.Repeat("a", 1016)+"\r\n"); err != nil {
					return
				}
			}
			_, _ = io.WriteString(w, "Content-Length: 2\r\n\r\n{}")
		}, body: `{"model":"m","messages":[]}`, wantStatus: http.StatusBadGateway},
		{name: "103 Early Hints", answer: func(w *bufio.Writer) {
			for range 3 {
				_, _ = io.WriteString(w, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
			}
			_, _ = io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
		}, body: `{"model":"m","messages":[]}`, wantStatus: http.StatusOK, want103: 3},
		{name: "401 before an 8 MiB body", answer: func(w *bufio.Writer) {
			_, _ = io.WriteString(w, "HTTP/1.1 401 Unauthorized\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
		}, body: big, wantStatus: http.StatusUnauthorized, orBadGateway: true},
	} {
		for _, client := range []string{BackendClientDirect, BackendClientNetHTTP} {
			t.Run(tc.name+"/"+client, func(t *testing.T) {
				url := rawBackend(t, tc.answer)
				g, err := New(Config{BackendClient: client, MaxBodyBytes: 16 << 20, Backends: []BackendConfig{{ID: "a", URL: url}}})
				require.NoError(t, err)
				t.Cleanup(g.Close)
				srv := httptest.NewServer(g)
				t.Cleanup(srv.Close)
				var n103 int
				ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
					Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
						if code == http.StatusEarlyHints {
							n103++
						}
						return nil
					},
				})
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(tc.body))
				require.NoError(t, err)
				req.Header.Set("Content-Type", "application/json")
				cl := srv.Client()
				t.Cleanup(cl.CloseIdleConnections)
				resp, err := cl.Do(req)
				require.NoError(t, err)
				_, _ = io.Copy(io.Discard, resp.Body)
				require.NoError(t, resp.Body.Close())
				if tc.orBadGateway && client == BackendClientNetHTTP && resp.StatusCode == http.StatusBadGateway {
					return
				}
				assert.Equal(t, tc.wantStatus, resp.StatusCode)
				assert.Equal(t, tc.want103, n103)
			})
		}
	}
}
