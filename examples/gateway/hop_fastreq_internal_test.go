package gateway

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// outgoing builds a request as rewrite leaves it: body in memory (io.NopCloser over a
// *bytes.Reader) when not empty.
func outgoing(t testing.TB, method, rawURL, host string, h http.Header, body string) *http.Request {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Skip(err)
	}
	req := &http.Request{Method: method, URL: u, Host: host, Header: h, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	if req.Header == nil {
		req.Header = http.Header{}
	}
	if body != "" {
		req.Body = io.NopCloser(bytes.NewReader([]byte(body)))
		req.ContentLength = int64(len(body))
	}
	return req.WithContext(context.Background())
}

// checkWriteRequestFast writes req with writeRequestFast and (a copy) with req.Write,
// parses both with http.ReadRequest and compares what a backend sees. It returns
// whether the fast path took req; when it did not, it must have written nothing.
func checkWriteRequestFast(t *testing.T, mk func() *http.Request) bool {
	var fb bytes.Buffer
	fw := bufio.NewWriter(&fb)
	fast, ferr := writeRequestFast(fw, mk())
	require.NoError(t, fw.Flush())
	if !fast {
		assert.Zero(t, fb.Len(), "declined but wrote")
		return false
	}
	require.NoError(t, ferr)
	var nb bytes.Buffer
	require.NoError(t, mk().Write(&nb), "fast path took a request req.Write fails")
	got, gerr := http.ReadRequest(bufio.NewReader(&fb))
	want, werr := http.ReadRequest(bufio.NewReader(&nb))
	require.Equal(t, werr == nil, gerr == nil, "parse: fast %v, net/http %v\nfast:\n%s\nnet/http:\n%s", gerr, werr, fb.String(), nb.String())
	if werr != nil {
		return true
	}
	assert.Equal(t, seenByBackend(want), seenByBackend(got))
	return true
}

// backendView is what a backend's server makes of a request.
type backendView struct {
	Method, RequestURI, Host string
	Header                   http.Header
	ContentLength            int64
	TransferEncoding         []string
	Close                    bool
	Body                     string
}

func seenByBackend(r *http.Request) backendView {
	b, _ := io.ReadAll(r.Body)
	return backendView{r.Method, r.RequestURI, r.Host, r.Header, r.ContentLength, r.TransferEncoding, r.Close, string(b)}
}

func TestWriteRequestFast(t *testing.T) {
	json := `{"model":"m","messages":[]}`
	cases := []struct {
		name string
		mk   func() *http.Request
		fast bool
	}{
		{"POST with a body", func() *http.Request {
			return outgoing(t, "POST", "http://b:8000/v1/chat/completions", "", http.Header{"Content-Type": {"application/json"}, "X-Session-Id": {"s1"}, "User-Agent": {""}}, json)
		}, true},
		{"default User-Agent", func() *http.Request {
			return outgoing(t, "POST", "http://b/v1/x", "", http.Header{}, json)
		}, true},
		{"client's User-Agent, padded", func() *http.Request {
			return outgoing(t, "POST", "http://b/", "", http.Header{"User-Agent": {"  agent/1  ", "second"}}, json)
		}, true},
		{"User-Agent of spaces", func() *http.Request {
			return outgoing(t, "POST", "http://b/", "", http.Header{"User-Agent": {"   "}}, json)
		}, true},
		{"Host field given", func() *http.Request {
			return outgoing(t, "POST", "http://b/", "api.example:443", http.Header{}, json)
		}, true},
		{"query and escaped path", func() *http.Request {
			return outgoing(t, "GET", "http://b/a%20b/c?x=1&y=%2F", "", http.Header{}, "")
		}, true},
		{"GET without a body: no Content-Length", func() *http.Request {
			return outgoing(t, "GET", "http://b/v1/models", "", http.Header{"Accept": {"*/*"}}, "")
		}, true},
		{"POST without a body: Content-Length 0", func() *http.Request {
			return outgoing(t, "POST", "http://b/x", "", http.Header{}, "")
		}, true},
		{"DELETE without a body", func() *http.Request {
			return outgoing(t, "DELETE", "http://b/x", "", http.Header{}, "")
		}, true},
		{"NoBody", func() *http.Request {
			r := outgoing(t, "PUT", "http://b/x", "", http.Header{}, "")
			r.Body = http.NoBody
			return r
		}, true},
		{"repeated fields, line breaks, padding, excluded keys", func() *http.Request {
			return outgoing(t, "POST", "http://b/", "", http.Header{
				"X-A": {"1", " 2 ", "a\r\nInjected: yes"}, "Accept": {"\tx\t"},
				"Content-Length": {"999"}, "Transfer-Encoding": {"chunked"}, "Trailer": {"X"}, "Host": {"evil"},
				"Bad Name": {"dropped"}, "X-Empty": {""},
			}, json)
		}, true},
		{"a large body", func() *http.Request {
			return outgoing(t, "POST", "http://b/", "", http.Header{}, strings.Repeat("z", 100<<10))
		}, true},
		{"non-canonical key", func() *http.Request {
			return outgoing(t, "POST", "http://b/", "", http.Header{"x-a": {"1"}, "X-A": {"2"}}, json)
		}, false},
		{"chunked", func() *http.Request {
			r := outgoing(t, "POST", "http://b/", "", http.Header{}, json)
			r.ContentLength = -1
			return r
		}, false},
		{"Transfer-Encoding set", func() *http.Request {
			r := outgoing(t, "POST", "http://b/", "", http.Header{}, json)
			r.TransferEncoding = []string{"chunked"}
			return r
		}, false},
		{"Trailer set", func() *http.Request {
			r := outgoing(t, "POST", "http://b/", "", http.Header{}, json)
			r.Trailer = http.Header{"X-T": nil}
			return r
		}, false},
		{"Close", func() *http.Request {
			r := outgoing(t, "POST", "http://b/", "", http.Header{}, json)
			r.Close = true
			return r
		}, false},
		{"length larger than the body", func() *http.Request {
			r := outgoing(t, "POST", "http://b/", "", http.Header{}, json)
			r.ContentLength++
			return r
		}, false},
		{"a body that is not in memory", func() *http.Request {
			r := outgoing(t, "POST", "http://b/", "", http.Header{}, "")
			r.Body, r.ContentLength = io.NopCloser(strings.NewReader(json)), int64(len(json))
			return r
		}, false},
		{"non-ASCII host", func() *http.Request {
			return outgoing(t, "POST", "http://b/", "bücher.example", http.Header{}, json)
		}, false},
		{"zone in host", func() *http.Request {
			return outgoing(t, "POST", "http://[fe80::1%25eth0]:80/", "", http.Header{}, json)
		}, false},
		{"invalid host", func() *http.Request {
			return outgoing(t, "POST", "http://b/", "a b", http.Header{}, json)
		}, false},
		{"CONNECT", func() *http.Request {
			return outgoing(t, "CONNECT", "http://b/", "", http.Header{}, "")
		}, false},
		{"opaque URL", func() *http.Request {
			return outgoing(t, "GET", "http:opaque", "b", http.Header{}, "")
		}, false},
		{"a write hook", func() *http.Request {
			r := outgoing(t, "POST", "http://b/", "", http.Header{}, json)
			return r.WithContext(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{WroteHeaders: func() {}}))
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.fast, checkWriteRequestFast(t, tc.mk))
		})
	}
}

// FuzzWriteRequestFast: for any method, URL, host, one field and body, the fast path
// either declines having written nothing or writes what a backend parses as it parses
// req.Write's bytes.
func FuzzWriteRequestFast(f *testing.F) {
	f.Add("POST", "http://b/v1/chat/completions", "", "X-Session-Id", "s1", `{"a":1}`)
	f.Add("GET", "http://b/a%20b?x=1", "h:1", "Accept", " x\r\ny ", "")
	f.Add("DELETE", "http://b/", "", "User-Agent", "", "")
	f.Fuzz(func(t *testing.T, method, rawURL, host, k, v, body string) {
		if method == "" || strings.ContainsAny(method, " \r\n\x00") {
			t.Skip() // req.Write does not check the method: neither parses
		}
		checkWriteRequestFast(t, func() *http.Request {
			return outgoing(t, method, rawURL, host, http.Header{k: {v}, "Content-Type": {"application/json"}}, body)
		})
	})
}
