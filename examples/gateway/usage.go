package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
)

// usage is what the lease needs of a response's usage object (usage_api.go maps each
// API's object to it): token counts (0 when absent or null) and whether the cached count
// was there.
type usage struct {
	PromptTokens     int64 // the whole prompt, cached tokens included
	CompletionTokens int64 // generated tokens
	CachedTokens     int64 // prompt tokens served from the prefix cache
	// CachedReported: the cached count was present, a number (so CachedTokens 0 means
	// nothing came from the prefix cache). vLLM sends prompt_tokens_details on
	// chat/completions only with --enable-prompt-tokens-details (off by default: absent
	// or null then), and an absent or null count is unknown, not 0
	// (affinity.DoneInfo.CacheReported).
	CachedReported bool
}

// maxSSELine bounds the partial SSE line kept between reads; longer lines are skipped.
const maxSSELine = 1 << 20

// leaseBody wraps a response body: it releases the lease when closed (or at EOF) with the
// usage found — in the JSON body given at construction, or in the last SSE "data:" line
// that carries a usage object (for the Anthropic Messages API, that line's usage over
// the first one's: message_delta's over message_start's), read in api's shape.
type leaseBody struct {
	io.ReadCloser
	st   *route
	sse  bool
	api  usageAPI
	once sync.Once

	mu    sync.Mutex
	line  []byte // partial SSE line
	last  []byte // last data line with "usage"
	first []byte // apiMessages: the first data line with "usage" (message_start)
	seen  bool   // apiMessages: first is set
	u     usage  // usage of a JSON body the gateway read whole
	json  bool   // a JSON body streamed through: keep its tail
	tail  []byte // the last up to 2 x maxJSONTail bytes of it
	err   error  // first read error other than EOF

	drop usageDrop // stream_usage: the usage-only event is taken out (usagedrop.go)
	end  streamEnd // an event stream cut before its end gets the error event (streamerr.go)
}

// maxJSONTail is how much of the end of a streamed-through JSON body is kept to find its
// "usage" object (OpenAI-compatible servers put it last; it is a few hundred bytes).
const maxJSONTail = 4096

// Read reads the backend's body: through the stream_usage filter when it is on, the
// usage scan, and, for an event stream cut before its end, followed by the error event
// (streamerr.go). At the end (any error) the lease is released.
func (b *leaseBody) Read(p []byte) (n int, err error) {
	switch {
	case b.end.err != nil: // the rest of the error event, then the error
		n, err = b.nextEvent(p)
	case b.drop.on:
		n, err = b.readDropping(p)
	default:
		n, err = b.ReadCloser.Read(p)
		if b.sse && n > 0 {
			b.scan(p[:n])
		}
		if b.json && n > 0 {
			b.keepTail(p[:n])
		}
	}
	if b.end.on && b.end.err == nil {
		n, err = b.endStream(p, n, err)
	}
	if err != nil {
		if err != io.EOF {
			b.mu.Lock()
			b.err = err
			b.mu.Unlock()
			if errors.Is(err, errDrainCut) { // a body copied through, cut by the drain's end
				b.st.ow.shut = true // logged as the drain's cut, counted client_closed (route.go)
			}
		}
		b.finish()
	}
	return n, err
}

// scan feeds SSE bytes and remembers the last complete data line mentioning "usage".
// Lines end with LF, CRLF or a lone CR (the SSE grammar): a CR ends the line, and the LF
// of a CRLF then ends an empty one, which reads as nothing.
func (b *leaseBody) scan(p []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		end := p
		if i >= 0 {
			end = p[:i]
		}
		if k := bytes.IndexByte(end, '\r'); k >= 0 {
			i = k
		}
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
			if b.api == apiMessages && !b.seen {
				b.first, b.seen = append(b.first[:0], bytes.TrimSpace(d)...), true
			}
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
// as usageValue does in api's shape (the value is checked to be valid JSON first).
func usageInTail(tail []byte, api usageAPI) usage {
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
	return usageValue(bytes.TrimSpace(raw), api)
}

func (b *leaseBody) finish() {
	b.once.Do(func() {
		b.mu.Lock()
		u, err := b.usage(), b.err
		b.mu.Unlock()
		b.st.release(u, err)
	})
}

// usage returns the usage found so far (b.mu held): of the SSE events, of the tail of a
// JSON body streamed through, or of the JSON body read whole.
func (b *leaseBody) usage() usage {
	switch {
	case b.sse && b.api == apiMessages && len(b.last) > 0:
		return messagesStreamUsage(b.first, b.last)
	case b.sse && len(b.last) > 0:
		return usageOf(b.last, b.api)
	case b.json && len(b.tail) > 0:
		return usageInTail(b.tail, b.api)
	}
	return b.u
}

// Close closes the backend body (ending the attempt's tracking by the drain: idleBody)
// and releases the lease.
func (b *leaseBody) Close() error {
	err := b.ReadCloser.Close()
	b.finish()
	return err
}

// wrapLease installs the lease-releasing body on resp (u: the usage of the JSON body
// when the gateway has already read it, else nil). An event stream of unknown length
// gets the error event if it is cut (streamerr.go), the end of the shutdown drain
// included: the drain cuts its attempt (trackAttempt).
func wrapLease(st *route, resp *http.Response, u *usage) {
	mt, _ := mediaType(resp.Header.Get("Content-Type"))
	b := &st.lb // one per request: modifyResponse runs once
	b.ReadCloser, b.st, b.sse, b.api = resp.Body, st, mt == "text/event-stream", st.usageAPI()
	if u != nil {
		b.u = *u
	} else if mt == "application/json" {
		b.json = true // streamed through (inject_metadata off, or too large): scan its tail
	}
	if st.askedUsage && b.sse { // the gateway asked for the usage chunk: take it out
		b.drop = usageDrop{on: true}
		resp.ContentLength = -1
		delete(resp.Header, "Content-Length")
	}
	if b.sse && resp.ContentLength < 0 {
		b.end.on = true
	}
	resp.Body = b
}
