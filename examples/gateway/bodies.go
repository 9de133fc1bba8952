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
// obj[open] == '{' and returns its raw value; of duplicate keys the last wins, as in
// encoding/json. obj must be valid JSON. A key written with escapes is decoded before
// comparing (rare; that case allocates). Cost: O(len(obj)).
func member(obj []byte, open int, key string) (v []byte, found bool) {
	i := skipWS(obj, open+1)
	for i < len(obj) && obj[i] == '"' {
		end := skipString(obj, i)
		raw := obj[i+1 : end-1]
		i = skipWS(obj, end)
		i = skipWS(obj, i+1) // past ':'
		vend := skipValue(obj, i)
		if keyIs(raw, key) {
			v, found = obj[i:vend], true
		}
		i = skipWS(obj, vend)
		if i < len(obj) && obj[i] == ',' {
			i = skipWS(obj, i+1)
		}
	}
	return v, found
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

// Request bodies are read into a buffer that grows as bytes arrive, each growth charged
// to limits.max_inflight_bytes before it is made (readRequestBody), so that a client
// holds at most one chunk or twice what it sent (the buffer doubles), never more than
// the Content-Length it announced. (Why not chunks: see "Limits and timeouts" in doc.go.)
const (
	// bodyChunk is the first buffer of a body with a Content-Length: a body that fits
	// (almost every request) is one allocation of exactly its length and one read.
	bodyChunk = 64 << 10
	// firstChunkedBuffer is the first buffer of a body of unknown length (chunked),
	// io.ReadAll's first size.
	firstChunkedBuffer = 512
)

// errOverBudget: growing the body buffer would exceed limits.max_inflight_bytes.
var errOverBudget = errors.New("gateway: request bytes in flight exceed limits.max_inflight_bytes")

// readRequestBody reads the request body (at most limit bytes, else an
// *http.MaxBytesError like http.MaxBytesReader's) into a buffer that starts at
// min(Content-Length, bodyChunk) — or firstChunkedBuffer when the length is unknown —
// and doubles up to the Content-Length (or limit) as bytes arrive. charge is called with
// the bytes of each buffer, the first included, before it is allocated; when it returns
// false the read stops with errOverBudget. The bytes charged add up to the final
// buffer's capacity (the smaller buffers it replaced are garbage). With a known
// Content-Length no http.MaxBytesReader is needed: the server's body reader ends there.
func readRequestBody(w http.ResponseWriter, r *http.Request, limit int64, charge func(n int64) bool) ([]byte, error) {
	src, want := r.Body, r.ContentLength
	size := min(want, bodyChunk)
	if want < 0 {
		src, want = http.MaxBytesReader(w, r.Body, limit), limit
		size = min(want, firstChunkedBuffer)
	}
	if !charge(size) {
		return nil, errOverBudget
	}
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			if int64(cap(buf)) >= want { // full: only the end may follow
				var one [1]byte
				n, err := src.Read(one[:])
				switch {
				case err != nil && err != io.EOF:
					return nil, err
				case n > 0: // a known length never gets here (the body reader ends there)
					return nil, &http.MaxBytesError{Limit: limit}
				case err == io.EOF:
					return buf, nil
				}
				continue
			}
			next := min(want, 2*int64(cap(buf)))
			if !charge(next - int64(cap(buf))) {
				return nil, errOverBudget
			}
			buf = append(make([]byte, 0, next), buf...)
		}
		n, err := src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
