package gateway

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"testing"

	"github.com/stretchr/testify/require"
)

// countingWriter counts the writes it gets.
type countingWriter struct{ writes, bytes int }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes++
	w.bytes += len(p)
	return len(p), nil
}

// The request to the backend leaves in one write, headers and body together: rewrite
// hands net/http a body it knows is in memory, else Request.Write flushes the headers on
// their own first (a second system call per request).
func TestRewriteBodyOneWrite(t *testing.T) {
	cfg, err := ParseConfig([]byte("backends:\n  - {id: b0, url: \"http://127.0.0.1:9\"}\n"))
	require.NoError(t, err)
	g, err := New(cfg)
	require.NoError(t, err)
	rt := g.state()
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	in := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
	st := &route{rt: rt, in: in, body: body, backend: rt.backends[0]}
	in = in.WithContext(context.WithValue(in.Context(), routeKey{}, st))
	out := in.Clone(in.Context())
	out.Body, out.ContentLength = bodyInRewrite{}, int64(len(body))
	pr := &httputil.ProxyRequest{In: in, Out: out}
	g.rewrite(pr)

	var w countingWriter
	bw := bufio.NewWriterSize(&w, 16<<10) // as directTransport writes
	require.NoError(t, pr.Out.Write(bw))
	require.NoError(t, bw.Flush())
	require.Equal(t, 1, w.writes, "writes of one request")
	require.Greater(t, w.bytes, len(body))
}
