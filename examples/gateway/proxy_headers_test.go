package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// The headers the gateway sets on the request to the backend (X-Forwarded-*, no Go
// default User-Agent) and hands to the client from the backend's response are those of
// httputil.ReverseProxy with SetXForwarded: the gateway writes them into per-request
// slots and the client's header map itself instead of letting ReverseProxy allocate
// them, and must not change what goes over the wire.
func TestProxyHeaders(t *testing.T) {
	type got struct{ xff, xfh, xfp, ua []string }
	for _, client := range []string{gateway.BackendClientDirect, gateway.BackendClientNetHTTP} {
		for _, tc := range []struct {
			name, ctype, ua string
			wantUA          []string
		}{
			{"json", "application/json", "agent/1.0", []string{"agent/1.0"}},
			{"json, no user agent", "application/json", "", nil},
			{"event stream", "text/event-stream", "agent/1.0", []string{"agent/1.0"}},
			{"plain text", "text/plain; charset=utf-8", "agent/1.0", []string{"agent/1.0"}},
		} {
			t.Run(client+"/"+tc.name, func(t *testing.T) {
				eachServer(t, func(t *testing.T, server string) {
					seenc := make(chan got, 1)
					backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						_, _ = io.Copy(io.Discard, r.Body)
						seenc <- got{r.Header["X-Forwarded-For"], r.Header["X-Forwarded-Host"], r.Header["X-Forwarded-Proto"], r.Header["User-Agent"]}
						h := w.Header()
						h.Set("Content-Type", tc.ctype)
						h["X-Multi"] = []string{"one", "two"}
						h.Add("Set-Cookie", "a=1")
						h.Add("Set-Cookie", "b=2")
						h.Set("Connection", "X-Hop")
						h.Set("X-Hop", "dropped")
						_, _ = io.WriteString(w, `{"id":"x","usage":{"prompt_tokens":1,"completion_tokens":1}}`)
					}))
					t.Cleanup(backend.Close)
					srv := serveGatewayOn(t, server, client, backend.URL)

					req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions",
						strings.NewReader(`{"model":"m","messages":[]}`))
					require.NoError(t, err)
					req.Host = "api.example:8443"
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("X-Session-ID", "s1")
					req.Header.Set("User-Agent", tc.ua) // "": net/http's client sends none
					req.Header.Set("X-Forwarded-For", "203.0.113.9")
					req.Header.Set("X-Forwarded-Host", "spoofed.example")
					req.Header.Set("X-Forwarded-Proto", "https")
					resp, err := srv.Client().Do(req)
					require.NoError(t, err)
					body, err := io.ReadAll(resp.Body)
					require.NoError(t, err)
					require.NoError(t, resp.Body.Close())
					require.Equal(t, http.StatusOK, resp.StatusCode, string(body))

					seen := <-seenc
					require.Equal(t, []string{"127.0.0.1"}, seen.xff, "X-Forwarded-For: the client's address only")
					require.Equal(t, []string{"api.example:8443"}, seen.xfh, "X-Forwarded-Host")
					require.Equal(t, []string{"http"}, seen.xfp, "X-Forwarded-Proto")
					require.Equal(t, tc.wantUA, seen.ua, "User-Agent")

					require.Equal(t, []string{tc.ctype}, resp.Header["Content-Type"])
					require.Equal(t, []string{"one", "two"}, resp.Header["X-Multi"])
					require.Equal(t, []string{"a=1", "b=2"}, resp.Header["Set-Cookie"])
					require.NotContains(t, resp.Header, "X-Hop", "a field named by Connection is hop-by-hop")
					require.Equal(t, []string{"b0"}, resp.Header[gateway.HeaderBackend])
					require.Equal(t, []string{"false"}, resp.Header[gateway.HeaderAffinityHit])
					require.Equal(t, []string{"miss"}, resp.Header[gateway.HeaderOutcome])
					if tc.ctype == "application/json" {
						require.Contains(t, string(body), `"`+gateway.MetadataKey+`"`)
					}
					if resp.ContentLength >= 0 { // not an event stream flushed as it comes (chunked)
						require.Equal(t, int64(len(body)), resp.ContentLength, "Content-Length matches the body sent")
					}
				})
			})
		}
	}
}

// An event stream reaches the client event by event, whether or not the backend sent a
// Content-Length with it: the gateway hands the response's Content-Type to the client's
// header map itself only where httputil.ReverseProxy no longer needs it to decide to
// flush every write. The backend sends its second event only once the client has read
// the first, so a response held back until its end fails the test (after 10 s).
func TestEventStreamFlushedPerEvent(t *testing.T) {
	const ev1, ev2 = "data: {\"n\":1}\n\n", "data: {\"n\":2}\n\n"
	for _, client := range []string{gateway.BackendClientDirect, gateway.BackendClientNetHTTP} {
		for _, withLength := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/content-length=%v", client, withLength), func(t *testing.T) {
				eachServer(t, func(t *testing.T, server string) {
					read1 := make(chan struct{})
					backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						_, _ = io.Copy(io.Discard, r.Body)
						w.Header().Set("Content-Type", "text/event-stream")
						if withLength {
							w.Header().Set("Content-Length", strconv.Itoa(len(ev1)+len(ev2)))
						}
						_, _ = io.WriteString(w, ev1)
						w.(http.Flusher).Flush()
						select {
						case <-read1:
						case <-r.Context().Done():
							return
						}
						_, _ = io.WriteString(w, ev2)
					}))
					t.Cleanup(backend.Close)
					c := dialGatewayOn(t, server, client, backend.URL)
					body := `{"model":"m","stream":true}`
					_, err := fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"+
						"X-Session-ID: s1\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
					require.NoError(t, err)
					br := bufio.NewReader(c)
					resp, err := http.ReadResponse(br, nil)
					require.NoError(t, err)
					require.Equal(t, []string{"text/event-stream"}, resp.Header["Content-Type"])
					first := make([]byte, len(ev1))
					_, err = io.ReadFull(resp.Body, first)
					require.NoError(t, err, "the first event before the backend sends the second")
					require.Equal(t, ev1, string(first))
					close(read1)
					rest, err := io.ReadAll(resp.Body)
					require.NoError(t, err)
					require.Equal(t, ev2, string(rest))
				})
			})
		}
	}
}
