package gateway_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chunked encodes parts as HTTP/1.1 chunks, without the last chunk.
func chunked(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		fmt.Fprintf(&b, "%x\r\n%s\r\n", len(p), p)
	}
	return b.String()
}

// An event stream the backend cuts after its headers — closed or reset before its last
// chunk, a malformed chunk, a stall past stream_idle_seconds — ends, for the client,
// with the gateway's error event (code backend_closed or backend_timeout, the backend
// named by its ID, no address) written at an event boundary (an open event is ended
// first: the line ends it lacks, whatever its line ends), and then the transport error
// as before. A stream the backend ends itself, a JSON body and an event stream with a
// Content-Length get no event. With stream_usage on, the event is not taken out by the
// filter. Both backend clients. (Before: no event: an SDK whose HTTP client takes a
// closed connection for the end of the body saw a stream that ended well.)
func TestStreamCutErrorEvent(t *testing.T) {
	const (
		sseHead  = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
		jsonHead = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
		lenHead  = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 400\r\n\r\n"
		ev1      = "data: {\"a\":1}\n\n"
		usage    = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7}}\n\n"
	)
	tests := []struct {
		name   string
		head   string
		body   string // raw, after head
		end    int    // closeConn, resetConn, stallConn
		extra  string // gateway YAML
		before string // what the client gets before the event (all it gets when code is "")
		code   string // the event's code; "": no event
		msg    string // the event's message
		clean  bool   // the body ends without a transport error
	}{
		{name: "closed at an event boundary", head: sseHead, body: chunked(ev1), before: ev1,
			code: "backend_closed", msg: `backend "b0": connection closed mid-stream`},
		{name: "closed inside a line", head: sseHead, body: chunked(ev1, `data: {"b"`), before: ev1 + `data: {"b"` + "\n\n",
			code: "backend_closed", msg: `backend "b0": connection closed mid-stream`},
		{name: "closed after a line, before its blank line", head: sseHead, body: chunked(ev1, "data: {}\n"),
			before: ev1 + "data: {}\n\n", code: "backend_closed"},
		{name: "closed after a CR-ended line", head: sseHead, body: chunked("data: {}\r"),
			before: "data: {}\r\n\n", code: "backend_closed"},
		{name: "closed after a CRLF-ended line", head: sseHead, body: chunked("data: {}\r\n"),
			before: "data: {}\r\n\n", code: "backend_closed"},
		{name: "closed after CRLF CRLF", head: sseHead, body: chunked("data: {}\r\n\r\n"),
			before: "data: {}\r\n\r\n", code: "backend_closed"},
		{name: "line ends in chunks of their own", head: sseHead, body: chunked("data: {}", "\r", "\n", "\r", "\n"),
			before: "data: {}\r\n\r\n", code: "backend_closed"},
		{name: "closed before any byte of the body", head: sseHead, before: "", code: "backend_closed"},
		{name: "reset", head: sseHead, body: chunked(ev1), end: resetConn, before: ev1,
			code: "backend_closed", msg: `backend "b0": connection reset mid-stream`},
		{name: "malformed chunk", head: sseHead, body: chunked(ev1) + "zz\r\n", before: ev1,
			code: "backend_closed", msg: `backend "b0": malformed response mid-stream`},
		{name: "stalled", head: sseHead, body: chunked(ev1, "data: {"), end: stallConn,
			extra: "timeouts: {stream_idle_seconds: 0.05}\n", before: ev1 + "data: {\n\n", code: "backend_timeout",
			msg: `backend "b0": timed out: sent nothing mid-response for 50ms`},
		{name: "stream_usage: the usage chunk out, the event in", head: sseHead, body: chunked(ev1, usage, "data: {"),
			extra: "stream_usage: true\n", before: ev1 + "data: {\n\n", code: "backend_closed"},
		{name: "ended by the backend", head: sseHead, body: chunked(ev1, "data: [DONE]\n\n") + "0\r\n\r\n",
			before: ev1 + "data: [DONE]\n\n", clean: true},
		{name: "JSON cut: no event", head: jsonHead, body: chunked(`{"id":`), extra: "inject_metadata: false\n",
			before: `{"id":`},
		{name: "event stream with a Content-Length cut: no event", head: lenHead, body: ev1, before: ev1},
	}
	for _, client := range []string{"direct", "nethttp"} {
		for _, tt := range tests {
			t.Run(client+"/"+tt.name, func(t *testing.T) {
				eachServer(t, func(t *testing.T, server string) {
					url := requestServer(t, func(c net.Conn, _ *http.Request) {
						_, _ = io.WriteString(c, tt.head+tt.body)
						switch tt.end {
						case resetConn:
							_ = c.(*net.TCPConn).SetLinger(0)
						case stallConn:
							_, _ = io.Copy(io.Discard, c) // until the gateway closes the connection
						}
					})
					srv := serveGatewayOn(t, server, client, url, tt.extra)
					req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
					require.NoError(t, err)
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("X-Session-ID", "s1")
					resp, err := srv.Client().Do(req)
					require.NoError(t, err)
					defer resp.Body.Close()
					require.Equal(t, http.StatusOK, resp.StatusCode)
					body, rerr := io.ReadAll(resp.Body)
					if tt.clean {
						require.NoError(t, rerr)
					} else {
						require.ErrorIs(t, rerr, io.ErrUnexpectedEOF, "a transport error after the event")
					}
					if tt.code == "" {
						assert.Equal(t, tt.before, string(body), "no error event")
						return
					}
					before, code, msg := splitErrorEvent(t, string(body))
					assert.Equal(t, tt.before, before)
					assert.Equal(t, tt.code, code)
					if tt.msg != "" {
						assert.Equal(t, tt.msg, msg)
					}
					assert.NotContains(t, msg, "127.0.0.1", "no address")
				})
			})
		}
	}
}
