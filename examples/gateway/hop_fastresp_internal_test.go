package gateway

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fastResponseCases are backend responses: fast says whether fastResponse takes them
// (the others go to http.ReadResponse).
var fastResponseCases = []struct {
	name   string
	method string
	raw    string
	fast   bool
}{
	{"plain JSON", "POST", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", true},
	{"no reason phrase", "POST", "HTTP/1.1 200\r\nContent-Length: 1\r\n\r\nx", true},
	{"reason with spaces", "POST", "HTTP/1.1 503  Service  Unavailable \r\nContent-Length: 1\r\n\r\nx", true},
	{"empty body", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true},
	{"next response buffered", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 200 OK\r\n", true},
	{"lower-case keys, repeated, odd spacing", "POST", "HTTP/1.1 201 Created\r\nx-request-id:a\r\nX-REQUEST-ID: \t b \t\r\nset-cookie: c=1\r\ncontent-length:  4 \r\nX-Empty:\r\n\r\nbody", true},
	{"obs-text value", "POST", "HTTP/1.1 200 OK\r\nX-Name: caf\xc3\xa9\r\nContent-Length: 1\r\n\r\nx", true},
	{"leading zeros", "POST", "HTTP/1.1 200 OK\r\nContent-Length: 007\r\n\r\n1234567", true},
	{"truncated body", "POST", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", true},
	{"many fields", "POST", "HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nF: 6\r\nG: 7\r\nH: 8\r\nI: 9\r\nContent-Length: 1\r\n\r\nx", true},
	{"HEAD", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", false},
	{"chunked", "POST", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n", false},
	{"chunked and a length", "POST", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n", false},
	{"no length", "POST", "HTTP/1.1 200 OK\r\n\r\nuntil close", false},
	{"empty length", "POST", "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n", false},
	{"two equal lengths", "POST", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", false},
	{"two lengths", "POST", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy", false},
	{"signed length", "POST", "HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\nx", false},
	{"huge length", "POST", "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\nx", false},
	{"Connection: close", "POST", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx", false},
	{"Pragma", "POST", "HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 1\r\n\r\nx", false},
	{"Trailer", "POST", "HTTP/1.1 200 OK\r\nTrailer: X-T\r\nContent-Length: 1\r\n\r\nx", false},
	{"HTTP/1.0", "POST", "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", false},
	{"HTTP/2 text", "POST", "HTTP/2.0 200 OK\r\nContent-Length: 1\r\n\r\nx", false},
	{"100 Continue first", "POST", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx", false},
	{"204", "POST", "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", false},
	{"304", "GET", "HTTP/1.1 304 Not Modified\r\n\r\n", false},
	{"status 600", "POST", "HTTP/1.1 600 X\r\nContent-Length: 1\r\n\r\nx", false},
	{"status not digits", "POST", "HTTP/1.1 2x0 OK\r\nContent-Length: 1\r\n\r\nx", false},
	{"status too long", "POST", "HTTP/1.1 2000 OK\r\nContent-Length: 1\r\n\r\nx", false},
	{"two spaces before the status", "POST", "HTTP/1.1  200 OK\r\nContent-Length: 1\r\n\r\nx", false},
	{"folded line", "POST", "HTTP/1.1 200 OK\r\nX-A: 1\r\n  2\r\nContent-Length: 1\r\n\r\nx", false},
	{"space before the colon", "POST", "HTTP/1.1 200 OK\r\nX-A : 1\r\nContent-Length: 1\r\n\r\nx", false},
	{"no colon", "POST", "HTTP/1.1 200 OK\r\nX-A\r\nContent-Length: 1\r\n\r\nx", false},
	{"control byte in a value", "POST", "HTTP/1.1 200 OK\r\nX-A: a\x01b\r\nContent-Length: 1\r\n\r\nx", false},
	{"bare LF", "POST", "HTTP/1.1 200 OK\nContent-Length: 1\n\nx", false},
	{"bare CR in a value", "POST", "HTTP/1.1 200 OK\r\nX-A: a\rb\r\nContent-Length: 1\r\n\r\nx", false},
	{"header block not all buffered", "POST", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n", false},
	{"garbage", "POST", "hello", false},
}

// checkFastResponse compares fastResponse with http.ReadResponse on raw, each from its
// own reader (16 KiB, the hop's buffer, filled by a first Peek as readResponse does):
// when fastResponse takes raw, everything the caller sees must be equal — the fields,
// the header, the body's bytes and final error, and what is left in the reader for the
// next response; when it does not, it must have consumed nothing. It returns whether
// fastResponse took raw.
func checkFastResponse(t *testing.T, method string, raw []byte) bool {
	req, err := http.NewRequest(method, "http://backend/", nil)
	require.NoError(t, err)
	fr := bufio.NewReaderSize(bytes.NewReader(raw), 16<<10)
	if _, err := fr.Peek(1); err != nil {
		return false
	}
	before := fr.Buffered()
	got := fastResponse(fr, req)
	if got == nil {
		assert.Equal(t, before, fr.Buffered(), "fastResponse consumed bytes it did not take")
		return false
	}
	nr := bufio.NewReaderSize(bytes.NewReader(raw), 16<<10)
	want, err := http.ReadResponse(nr, req)
	require.NoError(t, err, "fastResponse took a response net/http rejects: %q", raw)
	assert.Same(t, req, got.Request)
	assert.Equal(t, seenByCaller(want), seenByCaller(got))
	assert.NoError(t, got.Body.Close())
	wantRest, _ := io.ReadAll(nr)
	gotRest, _ := io.ReadAll(fr)
	assert.Equal(t, wantRest, gotRest, "what is left for the next response")
	return true
}

// callerView is what the hop's caller sees of a response.
type callerView struct {
	Status                             string
	StatusCode, ProtoMajor, ProtoMinor int
	Proto                              string
	Header, Trailer                    http.Header
	ContentLength                      int64
	Close, Uncompressed, NoBody        bool
	TransferEncoding                   []string
	Body                               string
	BodyErr                            error
}

func seenByCaller(r *http.Response) callerView {
	b, err := io.ReadAll(r.Body)
	return callerView{r.Status, r.StatusCode, r.ProtoMajor, r.ProtoMinor, r.Proto, r.Header, r.Trailer,
		r.ContentLength, r.Close, r.Uncompressed, r.Body == http.NoBody, r.TransferEncoding, string(b), err}
}

func TestFastResponse(t *testing.T) {
	for _, tc := range fastResponseCases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.fast, checkFastResponse(t, tc.method, []byte(tc.raw)))
		})
	}
}

// TestFastResponseBodyReads: the body gives its last bytes with io.EOF (so the hop's
// connection is released without one more Read), and after Close reads fail as
// net/http's do.
func TestFastResponseBodyReads(t *testing.T) {
	req, _ := http.NewRequest("POST", "http://backend/", nil)
	br := bufio.NewReaderSize(bytes.NewReader([]byte("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nabcd")), 16<<10)
	_, _ = br.Peek(1)
	resp := fastResponse(br, req)
	require.NotNil(t, resp)
	p := make([]byte, 3)
	n, err := resp.Body.Read(p)
	assert.Equal(t, 3, n)
	assert.NoError(t, err)
	n, err = resp.Body.Read(p)
	assert.Equal(t, 1, n)
	assert.ErrorIs(t, err, io.EOF)
	require.NoError(t, resp.Body.Close())
	_, err = resp.Body.Read(p)
	assert.ErrorIs(t, err, http.ErrBodyReadAfterClose)
}

// FuzzFastResponse: on any bytes, fastResponse either declines without consuming or
// agrees with http.ReadResponse in every field the caller sees.
func FuzzFastResponse(f *testing.F) {
	for _, tc := range fastResponseCases {
		f.Add(tc.method == "HEAD", []byte(tc.raw))
	}
	f.Fuzz(func(t *testing.T, head bool, raw []byte) {
		method := "POST"
		if head {
			method = "HEAD"
		}
		checkFastResponse(t, method, raw)
	})
}
