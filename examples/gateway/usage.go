package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sync"
)

// usage is the OpenAI-compatible usage object (vLLM, SGLang, TGI's OpenAI API), as far as
// the lease needs it: token counts (0 when absent or null) and whether the cached count
// was there.
type usage struct {
	PromptTokens     int64 // prompt_tokens
	CompletionTokens int64 // completion_tokens
	CachedTokens     int64 // prompt_tokens_details.cached_tokens
	// CachedReported: prompt_tokens_details.cached_tokens was present, a number (so
	// CachedTokens 0 means nothing came from the prefix cache). vLLM sends the details
	// only with --enable-prompt-tokens-details (off by default: absent or null then), and
	// an absent or null count is unknown, not 0 (affinity.DoneInfo.CacheReported).
	CachedReported bool
}

// usageOf returns the "usage" member of a JSON object (zero if absent or malformed).
// Cost: one pass (scanJSON) and a scan of the usage object's keys, 0 allocs.
func usageOf(data []byte) usage {
	top, obj, _ := scanJSON(data)
	if !obj {
		return usage{}
	}
	return usageValue(top.usage)
}

// usageValue decodes v, the raw value of a valid JSON object's "usage" member (nil:
// absent): zero if it is absent, not an object, or a count in it is not a non-negative
// integer (what decoding it into int64 fields with encoding/json would reject, negative
// counts aside). prompt_tokens_details that is absent, null or not an object, and a
// cached_tokens in it that is absent or null, leave the cached count unreported. No
// decoding, 0 allocs.
func usageValue(v []byte) usage {
	if len(v) == 0 || v[0] != '{' {
		return usage{}
	}
	var u usage
	_, ok := tokenCount(v, 0, "prompt_tokens", &u.PromptTokens)
	if _, ok2 := tokenCount(v, 0, "completion_tokens", &u.CompletionTokens); !ok2 {
		ok = false
	}
	if d, found := member(v, 0, "prompt_tokens_details"); ok && found && len(d) > 0 && d[0] == '{' {
		u.CachedReported, ok = tokenCount(d, 0, "cached_tokens", &u.CachedTokens)
	}
	if !ok {
		return usage{}
	}
	return u
}

// tokenCount stores the integer member key of the object at obj[open] in *dst and reports
// whether it was present (absent or null: false, *dst left zero); ok is false when it is
// something else than a non-negative integer.
func tokenCount(obj []byte, open int, key string, dst *int64) (present, ok bool) {
	v, found := member(obj, open, key)
	if !found || string(v) == "null" {
		return false, true
	}
	if len(v) == 0 || len(v) > 18 {
		return false, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return false, false
		}
		n = n*10 + int64(c-'0')
	}
	*dst = n
	return true, true
}

// maxSSELine bounds the partial SSE line kept between reads; longer lines are skipped.
const maxSSELine = 1 << 20

// leaseBody wraps a response body: it releases the lease when closed (or at EOF) with the
// usage found — in the JSON body given at construction, or in the last SSE "data:" line
// that carries a usage object.
type leaseBody struct {
	io.ReadCloser
	st   *route
	sse  bool
	once sync.Once

	mu   sync.Mutex
	line []byte // partial SSE line
	last []byte // last data line with "usage"
	u    usage  // usage of a JSON body the gateway read whole
	json bool   // a JSON body streamed through: keep its tail
	tail []byte // the last up to 2 x maxJSONTail bytes of it
	err  error  // first read error other than EOF
}

// maxJSONTail is how much of the end of a streamed-through JSON body is kept to find its
// "usage" object (OpenAI-compatible servers put it last; it is a few hundred bytes).
const maxJSONTail = 4096

func (b *leaseBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.sse && n > 0 {
		b.scan(p[:n])
	}
	if b.json && n > 0 {
		b.keepTail(p[:n])
	}
	if err != nil {
		if err != io.EOF {
			b.mu.Lock()
			b.err = err
			b.mu.Unlock()
		}
		b.finish()
	}
	return n, err
}

// scan feeds SSE bytes and remembers the last complete data line mentioning "usage".
func (b *leaseBody) scan(p []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(b.line)+len(p) <= maxSSELine {
				b.line = append(b.line, p...)
			} else {
				b.line = b.line[:0]
			}
			return
		}
		line := p[:i]
		if len(b.line) > 0 {
			b.line = append(b.line, line...)
			line = b.line
		}
		line = bytes.TrimRight(line, "\r")
		if d, ok := bytes.CutPrefix(line, []byte("data:")); ok && bytes.Contains(d, []byte(`"usage"`)) {
			b.last = append(b.last[:0], bytes.TrimSpace(d)...)
		}
		b.line = b.line[:0]
		p = p[i+1:]
	}
}

// keepTail appends p to the kept tail, dropping all but the last maxJSONTail bytes once
// it holds twice that (amortized O(1) per byte, bounded memory).
func (b *leaseBody) keepTail(p []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(p) >= maxJSONTail {
		b.tail = append(b.tail[:0], p[len(p)-maxJSONTail:]...)
		return
	}
	if len(b.tail)+len(p) > 2*maxJSONTail {
		keep := b.tail[len(b.tail)-(maxJSONTail-len(p)):]
		b.tail = append(b.tail[:0], keep...)
	}
	b.tail = append(b.tail, p...)
}

// usageInTail decodes the object after the last "usage" key in the tail of a JSON body,
// as usageValue does (the value is checked to be valid JSON first).
func usageInTail(tail []byte) usage {
	i := bytes.LastIndex(tail, []byte(`"usage"`))
	if i < 0 {
		return usage{}
	}
	rest := bytes.TrimLeft(tail[i+len(`"usage"`):], " \t\r\n")
	rest, ok := bytes.CutPrefix(rest, []byte(":"))
	if !ok {
		return usage{}
	}
	var raw json.RawMessage
	if json.NewDecoder(bytes.NewReader(rest)).Decode(&raw) != nil {
		return usage{}
	}
	return usageValue(bytes.TrimSpace(raw))
}

func (b *leaseBody) finish() {
	b.once.Do(func() {
		b.mu.Lock()
		u, err := b.u, b.err
		if b.sse && len(b.last) > 0 {
			u = usageOf(b.last)
		}
		if b.json && len(b.tail) > 0 {
			u = usageInTail(b.tail)
		}
		b.mu.Unlock()
		b.st.release(u, err)
	})
}

// Close closes the backend body and releases the lease.
func (b *leaseBody) Close() error {
	err := b.ReadCloser.Close()
	b.finish()
	return err
}

// wrapLease installs the lease-releasing body on resp (u: the usage of the JSON body
// when the gateway has already read it, else nil).
func wrapLease(st *route, resp *http.Response, u *usage) {
	mt, _ := mediaType(resp.Header.Get("Content-Type"))
	b := &st.lb // one per request: modifyResponse runs once
	b.ReadCloser, b.st, b.sse = resp.Body, st, mt == "text/event-stream"
	if u != nil {
		b.u = *u
	} else if mt == "application/json" {
		b.json = true // streamed through (inject_metadata off, or too large): scan its tail
	}
	resp.Body = b
}
