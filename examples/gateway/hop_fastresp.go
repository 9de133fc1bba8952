package gateway

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// fastResponse reads the response at the head of br without net/http's general reader
// when it is a plain one: its header block already buffered, "HTTP/1.1", a status of
// 200-599 but 204 and 304, CRLF line ends, no folded lines and no control bytes, framed
// by exactly one Content-Length (no Transfer-Encoding, and no Trailer, Connection or
// Pragma field, which net/http acts on), to a request other than HEAD — what a
// non-streaming JSON answer looks like. It returns such a response as http.ReadResponse
// would, field for field (checked by TestFastResponse and FuzzFastResponse against
// it); for anything else it returns nil having consumed nothing, and the caller reads
// the response with http.ReadResponse. Costs one pass over the header block and six
// allocations (the block as one string, of which the status, keys and values are
// substrings; the map; one array for the values; the response; its body), against
// http.ReadResponse's eight for three fields. Not safe for concurrent use of br.
func fastResponse(br *bufio.Reader, req *http.Request) *http.Response {
	if req.Method == http.MethodHead {
		return nil
	}
	buf, _ := br.Peek(br.Buffered())
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 {
		return nil
	}
	block := buf[:end+2] // the status line and the fields, each with its CRLF
	lines := 0
	for i, c := range block {
		switch {
		case c == '\r':
			if block[i+1] != '\n' { // in range: the block ends with CRLF
				return nil
			}
		case c == '\n':
			if i == 0 || block[i-1] != '\r' {
				return nil
			}
			lines++
		case c < ' ' && c != '\t' || c == 0x7f:
			return nil
		}
	}
	line, _, _ := bytes.Cut(block, []byte("\r\n"))
	if len(line) < 12 || string(line[:9]) != "HTTP/1.1 " || (len(line) > 12 && line[12] != ' ') {
		return nil
	}
	code := 0
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return nil
		}
		code = code*10 + int(c-'0')
	}
	if code < 200 || code > 599 || code == http.StatusNoContent || code == http.StatusNotModified {
		return nil
	}
	fields := lines - 1
	s := string(block) // one allocation for the status and every key and value
	status := s[9:len(line)]
	s = s[len(line)+2:]
	h := make(http.Header, fields)
	strs := make([]string, fields)
	cl := int64(-1)
	for s != "" {
		kv, next, _ := strings.Cut(s, "\r\n")
		s = next
		k, v, ok := strings.Cut(kv, ":")
		if !ok || !httpguts.ValidHeaderFieldName(k) {
			return nil // a malformed line, or a folded one (it starts with a space)
		}
		v = strings.Trim(v, " \t") // net/http trims the line's end and the value's start
		key := textproto.CanonicalMIMEHeaderKey(k)
		switch key {
		case "Transfer-Encoding", "Trailer", "Connection", "Pragma":
			return nil
		case "Content-Length":
			if cl >= 0 || v == "" {
				return nil
			}
			for i := 0; i < len(v); i++ {
				if v[i] < '0' || v[i] > '9' {
					return nil
				}
			}
			n, err := strconv.ParseUint(v, 10, 63)
			if err != nil {
				return nil
			}
			cl = int64(n)
		}
		if vv := h[key]; vv != nil {
			h[key] = append(vv, v)
		} else {
			vv, strs = strs[:1:1], strs[1:]
			vv[0] = v
			h[key] = vv
		}
	}
	if cl < 0 {
		return nil
	}
	_, _ = br.Discard(end + 4)
	resp := &http.Response{Status: status, StatusCode: code, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, ContentLength: cl, Request: req, Body: http.NoBody}
	if cl > 0 {
		resp.Body = &fixedBody{r: br, left: cl}
	}
	return resp
}

// fixedBody is a response body of known length read from the connection's buffer, as
// net/http's: the last bytes come with io.EOF, a connection that ends early is
// io.ErrUnexpectedEOF, and a Read after Close is http.ErrBodyReadAfterClose. Not safe
// for concurrent use: the hop's body (hopBody) reads it and closes it at its end, from
// one goroutine.
type fixedBody struct {
	r      *bufio.Reader
	left   int64
	closed bool
}

// Read reads at most the bytes left of the body.
func (b *fixedBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	if err == io.EOF && b.left > 0 {
		return n, io.ErrUnexpectedEOF
	}
	if err == nil && b.left == 0 {
		err = io.EOF
	}
	return n, err
}

// Close ends the body; the bytes left stay in the reader (the hop closes a connection
// whose body was not read to its end).
func (b *fixedBody) Close() error {
	b.closed = true
	return nil
}
