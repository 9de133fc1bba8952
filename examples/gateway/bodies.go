package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
)

// The hot path's JSON handling: a request's "model" and a response's top-level keys are
// found in the same pass that validates the body (scanJSON: no decoding into maps or
// structs, no allocation), and response bodies are assembled in pooled buffers.

// skipWS returns the index of the first non-whitespace byte of b at or after i.
func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the JSON string starting at b[i] == '"'.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// skipValue returns the index just past the JSON value starting at b[i]. b must be valid
// JSON (json.Valid, scanJSON), so only strings and nesting need tracking.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default: // number, true, false, null
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' &&
			b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
			i++
		}
		return i
	}
}

// member finds the top-level member named key of the JSON object that starts at
// obj[open] == '{' and returns its raw value. obj must be valid JSON. A key written with
// escapes is decoded before comparing (rare; that case allocates). Cost: O(len(obj)).
func member(obj []byte, open int, key string) ([]byte, bool) {
	i := skipWS(obj, open+1)
	for i < len(obj) && obj[i] == '"' {
		end := skipString(obj, i)
		raw := obj[i+1 : end-1]
		i = skipWS(obj, end)
		i = skipWS(obj, i+1) // past ':'
		vend := skipValue(obj, i)
		if keyIs(raw, key) {
			return obj[i:vend], true
		}
		i = skipWS(obj, vend)
		if i < len(obj) && obj[i] == ',' {
			i = skipWS(obj, i+1)
		}
	}
	return nil, false
}

func keyIs(raw []byte, key string) bool {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == key
	}
	var s string
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	return json.Unmarshal(q, &s) == nil && s == key
}

// jsonObject reports whether b is valid JSON (json.Valid) whose top-level value is an
// object, and the index of its '{'. Cost: one pass (scanJSON), 0 allocs.
func jsonObject(b []byte) (int, bool) {
	top, obj, _ := scanJSON(b)
	if !obj {
		return 0, false
	}
	return top.open, true
}

// appendJSONString appends s as a JSON string. s is a backend ID or tier from the
// configuration; invalid UTF-8 goes through encoding/json (which replaces it).
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// appendMetadata appends the JSON of Metadata{backend, hit, tier} (the same bytes as
// json.Marshal) to dst without reflection.
func appendMetadata(dst []byte, backend string, hit bool, tier string) []byte {
	dst = append(dst, `{"backend":`...)
	dst = appendJSONString(dst, backend)
	if hit {
		dst = append(dst, `,"affinity_hit":true,"tier":`...)
	} else {
		dst = append(dst, `,"affinity_hit":false,"tier":`...)
	}
	dst = appendJSONString(dst, tier)
	return append(dst, '}')
}

// pooledBuffers are the gateway's byte buffers: response bodies being rewritten and the
// ReverseProxy's copy buffers (httputil.BufferPool). Buffers that grew beyond
// maxPooledBuffer are dropped instead of kept.
const (
	copyBufferSize  = 32 << 10
	maxPooledBuffer = 256 << 10
)

// bufferPool pools buffers by pointer (sync.Pool holds interface values: a slice would
// be boxed, an allocation per Put). The pointers themselves are recycled through
// holders, so that neither Get nor Put allocates once the pools are warm.
type bufferPool struct{ p, holders sync.Pool }

// Get returns a buffer of length copyBufferSize (httputil.BufferPool).
func (bp *bufferPool) Get() []byte {
	if h, ok := bp.p.Get().(*[]byte); ok {
		b := (*h)[:copyBufferSize]
		*h = nil
		bp.holders.Put(h)
		return b
	}
	return make([]byte, copyBufferSize)
}

// Put returns a buffer to the pool (httputil.BufferPool).
func (bp *bufferPool) Put(b []byte) {
	if cap(b) < copyBufferSize || cap(b) > maxPooledBuffer {
		return
	}
	h, ok := bp.holders.Get().(*[]byte)
	if !ok {
		h = new([]byte)
	}
	*h = b
	bp.p.Put(h)
}

// pooledBody is a response body assembled in a pooled buffer; Close returns the buffer.
type pooledBody struct {
	r    bytes.Reader
	buf  []byte
	pool *bufferPool
}

func (b *pooledBody) Read(p []byte) (int, error) { return b.r.Read(p) }

// WriteTo lets io.Copy skip the copy buffer.
func (b *pooledBody) WriteTo(w io.Writer) (int64, error) { return b.r.WriteTo(w) }

func (b *pooledBody) Close() error {
	if b.buf != nil {
		b.pool.Put(b.buf)
		b.buf = nil
	}
	return nil
}

// readInto appends r's content to dst, up to limit bytes; more than limit is
// errTooLarge with what was read so far in the result.
func readInto(dst []byte, r io.Reader, limit int) ([]byte, error) {
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):min(cap(dst), limit+1)])
		dst = dst[:len(dst)+n]
		if len(dst) > limit {
			return dst, errTooLarge
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

var errTooLarge = errors.New("gateway: body over the limit")

// readRequestBody reads the request body (at most limit bytes, else an
// *http.MaxBytesError like http.MaxBytesReader's). With a known Content-Length it makes
// one allocation of exactly that size instead of io.ReadAll's doublings, and needs no
// http.MaxBytesReader: the server's body reader ends at the Content-Length.
func readRequestBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if n := r.ContentLength; n > 0 && n <= limit {
		buf := make([]byte, n)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			return nil, err
		}
		var one [1]byte
		if _, err := r.Body.Read(one[:]); err != io.EOF && err != nil {
			return nil, err
		}
		return buf, nil
	}
	return io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
}
