package h1_test

// Bytes that follow a request while its handler runs: the next request or a hijacked
// tunnel's, each server alike (the client-gone watch must not lose them).

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentserve/sessionaffinity/examples/gateway/internal/h1"
)

// TestConformanceLateBytes: bytes the client sends while a handler runs (after its
// request was read, so they wait in the socket, where h1's client-gone watch reads one
// byte and keeps it; net/http's background read does the same) reach what comes next:
// the next request, or the tunnel after a Hijack. The handler runs past the watch's
// start (4 x DefaultClientGoneAfter) before it answers or hijacks.
func TestConformanceLateBytes(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	const runFor = 4 * h1.DefaultClientGoneAfter
	for _, s := range confServers {
		for _, hijack := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/hijack=%v", s.name, hijack), func(t *testing.T) {
				started := make(chan struct{}, 2)
				cancelled := make(chan bool, 2)
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					started <- struct{}{}
					select {
					case <-r.Context().Done():
						cancelled <- true
					case <-time.After(runFor):
						cancelled <- false
					}
					if !hijack || r.URL.Path != "/first" {
						w.Header().Set("X-Handler", "1")
						_, _ = io.WriteString(w, "ok "+r.URL.Path)
						return
					}
					conn, rw, err := http.NewResponseController(w).Hijack()
					if err != nil {
						return
					}
					defer conn.Close()
					_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
					line, _ := rw.ReadString('\n')
					_, _ = rw.WriteString("tunnel got " + line)
					_ = rw.Flush()
				})
				srv := startConf(t, s.name, s.mk, confConfig{Handler: h})
				c := dialConf(t, srv.addr)
				br := bufio.NewReader(c)
				if _, err := io.WriteString(c, req("GET", "/first")); err != nil {
					t.Fatal(err)
				}
				<-started
				late := req("GET", "/second")
				if hijack {
					late = "late bytes\n"
				}
				if _, err := io.WriteString(c, late); err != nil {
					t.Fatal(err)
				}
				if <-cancelled {
					t.Fatal("the first request's context was cancelled: late bytes are not a client leaving")
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				first := describe(resp)
				var next string
				if hijack {
					next, err = br.ReadString('\n')
				} else {
					<-started
					<-cancelled
					var r2 *http.Response
					if r2, err = http.ReadResponse(br, nil); err == nil {
						next = describe(r2)
					}
				}
				if err != nil {
					t.Fatalf("after %s: %v", first, err)
				}
				want := `HTTP/1.1 200 framing=length=10 Content-Type="text/plain; charset=utf-8" Date=set X-Handler="1" body="ok /second"`
				if hijack {
					want = "tunnel got late bytes\n"
				}
				if next != want {
					t.Errorf("after %s: got %q, want %q", first, next, want)
				}
			})
		}
	}
}

func TestConformanceHijack(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	for _, s := range confServers {
		t.Run(s.name, func(t *testing.T) {
			done := make(chan string, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				conn, rw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					done <- "hijack: " + err.Error()
					return
				}
				defer conn.Close()
				_, werr := w.Write([]byte("x"))
				_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
				_ = rw.Flush()
				for { // echo upper-cased lines, the buffered ones first
					line, err := rw.ReadString('\n')
					if err != nil {
						break
					}
					_, _ = rw.WriteString(strings.ToUpper(line))
					_ = rw.Flush()
				}
				done <- "write after hijack: " + errText(werr)
			})
			srv := startConf(t, s.name, s.mk, confConfig{Handler: h})
			c := dialConf(t, srv.addr)
			br := bufio.NewReader(c)
			if _, err := io.WriteString(c, req("GET", "/", "Connection: Upgrade\r\nUpgrade: echo\r\n")+"pipelined\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("status %d, want 101", resp.StatusCode)
			}
			var got bytes.Buffer
			for _, line := range []string{"", "after\n"} {
				if line != "" {
					if _, err := io.WriteString(c, line); err != nil {
						t.Fatal(err)
					}
				}
				l, err := br.ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				got.WriteString(l)
			}
			if got.String() != "PIPELINED\nAFTER\n" {
				t.Errorf("echoed %q, want %q", got.String(), "PIPELINED\nAFTER\n")
			}
			_ = c.(*net.TCPConn).CloseWrite()
			if b, _ := readUntilClosed(t, c, br); len(b) != 0 {
				t.Errorf("read %q after the tunnel, want the close", b)
			}
			if r := <-done; r != "write after hijack: http.ErrHijacked" {
				t.Errorf("handler: %s", r)
			}
		})
	}
}

// errText names err, http.ErrHijacked by its name.
func errText(err error) string {
	if errors.Is(err, http.ErrHijacked) {
		return "http.ErrHijacked"
	}
	return fmt.Sprint(err)
}
