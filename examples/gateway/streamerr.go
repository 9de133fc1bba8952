package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// The error event of a cut stream.
//
// An event stream (text/event-stream, no Content-Length) that the gateway ends before
// its end, after its headers went out — the shutdown drain's end ([Gateway.Serve]), the
// backend closing, resetting or garbling the connection mid-stream, a stall past
// timeouts.stream_idle_seconds — is aborted as before (the connection closes without the
// last chunk: HTTP clients see a transport error), but first gets one SSE event, written
// at an event boundary and flushed:
//
//	event: error
//	data: {"type":"error","error":{"type":"server_error","code":"<code>","message":"<text>"}}
//
// Why: some HTTP clients take a closed connection for the end of the body — Node's fetch
// (undici) does for a response with Connection: close, which net/http's server sends on
// a response begun while the drain runs — and the OpenAI SDK's stream then ends as if
// it had succeeded (finish_reason null). An event named "error" whose data has an
// "error" member makes the OpenAI SDKs (Node and Python) raise an APIError, and the
// Anthropic SDK raise its error, whatever the transport does next. The codes are the
// gateway's own: "shutdown" (the drain's end), "backend_closed" (the backend ended the
// connection early or sent a malformed body: code_class backend_closed) and
// "backend_timeout" (a stall: [ErrBackendTimeout], as the 504 before any byte). The
// message names the backend by its ID and a short reason (failureReason), never an
// address.
//
// When the bytes forwarded so far end inside an event (not after a blank line), that
// event is ended first (the line ends it lacks), so the error event is parsed as an
// event of its own; a client may then reject the partial event before it (invalid
// JSON) — an error too, not a silent success. Not written: when the client went away (a
// write failed, or its request's context ended: nobody reads it), when the response is
// not an event stream of unknown length (a JSON body; a stream with a Content-Length,
// which a client sees cut short), and when the backend ended the stream itself (its
// last event, then a clean end of the body). The event is added after the stream_usage
// filter and the usage scan: it is never taken out nor booked as usage.

// errDrainCut is the cause with which [Gateway.Serve] cancels, when its drain ends, the
// attempts still waiting for their response headers, so that each request is answered
// a 503 "shutdown" (proxyError), and those of the event streams still running, so that
// each writes its error event, before the connections are closed.
var errDrainCut = errors.New("gateway: cut at the end of the shutdown drain")

// streamEnd is the state a leaseBody keeps to end an event stream with the error event.
// Used by the goroutine copying the response only.
type streamEnd struct {
	on      bool    // an event stream of unknown length: a cut gets the event
	tail    sseTail // where the bytes forwarded so far end
	pending []byte  // the rest of the event, not returned yet
	err     error   // the read error returned after the event (nil: no event owed)
}

// sseTail tracks where the bytes of an event stream forwarded so far end: inside a line,
// after the end of a line with content (an event is open), or at an event boundary.
// Lines end with LF, CRLF or a lone CR (the SSE grammar).
type sseTail struct {
	content bool // the last line has bytes and no end yet
	cr      bool // the last byte was a CR that ended a line: an LF next belongs to it
	open    bool // an event has begun: a line with content since the last blank line
}

// feed moves the state past p. Only the line ends at the end of p need a look: any other
// byte before them resets the state to "inside a line". O(trailing line ends) after one
// backward scan of them; 0 allocs.
func (t *sseTail) feed(p []byte) {
	i := len(p)
	for i > 0 && (p[i-1] == '\n' || p[i-1] == '\r') {
		i--
	}
	if i > 0 {
		*t = sseTail{content: true, open: true}
	}
	for _, c := range p[i:] {
		if c == '\n' && t.cr { // the LF of a CRLF
			t.cr = false
			continue
		}
		t.cr = c == '\r'
		if t.content {
			t.content = false // a line with content ended: the event stays open
		} else {
			t.open = false // a blank line: the event ended
		}
	}
}

// closing returns the line ends that end the open event, "" at an event boundary: LF LF
// inside a line (its end, then a blank line) and after a line ended by a CR (whose LF may
// still come: the first LF is taken as that), LF after a line ended by an LF.
func (t *sseTail) closing() string {
	switch {
	case !t.open:
		return ""
	case !t.content && !t.cr:
		return "\n"
	}
	return "\n\n"
}

// endStream follows a read of n bytes into p with err: it records where the stream
// now ends and, when err cuts the stream (not io.EOF) and an error event is owed, appends
// as much of the event to p[n:] as fits. The error is returned only once the whole
// event has been (the rest goes out on the next reads: nextEvent).
func (b *leaseBody) endStream(p []byte, n int, err error) (int, error) {
	e := &b.end
	if n > 0 {
		e.tail.feed(p[:n])
	}
	if err == nil || err == io.EOF {
		return n, err
	}
	ev := b.errorEvent(err)
	if ev == nil {
		return n, err
	}
	e.pending, e.err = ev, err
	k, err := b.nextEvent(p[n:])
	return n + k, err
}

// nextEvent returns the next bytes of the error event, and the read error once the
// event is out.
func (b *leaseBody) nextEvent(p []byte) (int, error) {
	e := &b.end
	k := copy(p, e.pending)
	e.pending = e.pending[k:]
	if len(e.pending) > 0 {
		return k, nil
	}
	return k, e.err
}

// errorEvent returns the error event for err, a read error that cuts the stream,
// preceded by the line ends the open event needs; nil when none is written (the client
// went away). A drain cut is marked on the response's writer (outcomeWriter.shut).
func (b *leaseBody) errorEvent(err error) []byte {
	st := b.st
	w := &st.ow
	drained := errors.Is(err, errDrainCut)
	if drained {
		w.shut = true
	}
	if errors.Is(err, context.Canceled) || w.gone || st.in.Context().Err() != nil {
		return nil // the client went away (or its connection was closed): nobody reads it
	}
	var code, msg string
	id := ""
	if bk, _ := st.current(); bk != nil {
		id = bk.id
	}
	switch {
	case drained:
		code, msg = "shutdown", "the gateway is shutting down: stream cut at the end of its drain"
	case errors.Is(err, ErrBackendTimeout): // "timed out: sent nothing mid-response for 1m0s"
		code, msg = "backend_timeout", fmt.Sprintf("backend %q: %s", id, failureReason(err))
	default:
		// A read error that is not the connection's is the body's framing: malformed.
		code, msg = "backend_closed", fmt.Sprintf("backend %q: %s mid-stream", id, failureReason(badResponse(err)))
	}
	return appendErrorEvent([]byte(b.end.tail.closing()), code, msg)
}

// streamError is the data of the error event.
type streamError struct {
	Type  string `json:"type"` // "error"
	Error struct {
		Type    string `json:"type"` // "server_error"
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// appendErrorEvent appends the error event with code and msg to dst.
func appendErrorEvent(dst []byte, code, msg string) []byte {
	e := streamError{Type: "error"}
	e.Error.Type, e.Error.Code, e.Error.Message = "server_error", code, msg
	data, _ := json.Marshal(e)
	dst = append(dst, "event: error\ndata: "...)
	dst = append(dst, data...)
	return append(dst, "\n\n"...)
}
