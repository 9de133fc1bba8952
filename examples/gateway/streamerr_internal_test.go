package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

// sseEvent is one event a reference SSE parser dispatched.
type sseEvent struct{ typ, data string }

// parseSSE is the SSE grammar's event dispatch (WHATWG HTML, "Interpreting an event
// stream"), written independently of the gateway's code: lines end with CRLF, LF or CR;
// a blank line dispatches the event when its data buffer is not empty; "event" sets the
// type, "data" appends a line of data; comments and other fields are ignored. An
// unfinished event at the end is not dispatched.
func parseSSE(s string) []sseEvent {
	var out []sseEvent
	var typ, data string
	hasData := false
	for len(s) > 0 {
		i := strings.IndexAny(s, "\r\n")
		if i < 0 {
			break // an unfinished line
		}
		line := s[:i]
		if s[i] == '\r' && i+1 < len(s) && s[i+1] == '\n' {
			i++
		}
		s = s[i+1:]
		if line == "" {
			if hasData {
				out = append(out, sseEvent{typ, data})
			}
			typ, data, hasData = "", "", false
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "event":
			typ = value
		case "data":
			if hasData {
				data += "\n"
			}
			data, hasData = data+value, true
		}
	}
	return out
}

var sseTailCases = []string{
	"", "data: {}\n\n", "data: {}\n", "data: {}", "data: {}\r", "data: {}\r\n", "data: {}\r\n\r\n",
	"data: {}\r\r", "data: {}\n\r\n", "event: x\ndata: 1\ndata: 2\n", ": comment\n", ": comment", "\n", "\r",
	"\r\n", "\n\n\n", "data: {\"a\":1}\n\ndata: {\"b\"", "data: [DONE]\n\n", "data: a\r\ndata: b\r", "data:\n",
	"id: 7\n\nretry: 5\n",
}

// checkClosing feeds data to an sseTail in reads of chunk bytes and checks that the line
// ends it says the stream needs make the error event that follows an event of its own,
// the last one a parser dispatches, and that nothing is added at an event boundary.
func checkClosing(t *testing.T, data string, chunk int) {
	t.Helper()
	var tail sseTail
	for p := []byte(data); len(p) > 0; {
		n := min(chunk, len(p))
		tail.feed(p[:n])
		p = p[n:]
	}
	closing := tail.closing()
	evs := parseSSE(data + closing + "event: error\ndata: {}\n\n")
	if len(evs) == 0 || evs[len(evs)-1] != (sseEvent{"error", "{}"}) {
		t.Fatalf("%q read %d bytes at a time: closed with %q, the events are %q", data, chunk, closing, evs)
	}
	// The events of data itself, once its open event is ended, are all dispatched before it.
	if want := parseSSE(data + closing); len(evs) != len(want)+1 {
		t.Fatalf("%q + %q: %d events before the error event, want %d", data, closing, len(evs)-1, len(want))
	}
	norm := strings.ReplaceAll(strings.ReplaceAll(data, "\r\n", "\n"), "\r", "\n")
	if atBoundary := strings.Trim(norm, "\n") == "" || strings.HasSuffix(norm, "\n\n"); atBoundary != (closing == "") {
		t.Fatalf("%q (at an event boundary: %v) read %d bytes at a time: closed with %q", data, atBoundary, chunk, closing)
	}
}

// However the stream is split into reads, the error event follows at an event boundary:
// a parser dispatches it as an event of its own, after every event of the stream.
func TestSSETailEverySplit(t *testing.T) {
	for _, data := range sseTailCases {
		for chunk := 1; chunk <= max(1, len(data)); chunk++ {
			checkClosing(t, data, chunk)
		}
	}
}

func FuzzSSETail(f *testing.F) {
	for _, c := range sseTailCases {
		f.Add(c, 1)
		f.Add(c, 3)
	}
	f.Fuzz(func(t *testing.T, data string, chunk int) {
		checkClosing(t, data, 1+(chunk&0xffff)%64)
	})
}

// errBody returns its bytes, then err.
type errBody struct {
	r   *bytes.Reader
	err error
}

func (b *errBody) Read(p []byte) (int, error) {
	if b.r.Len() == 0 {
		return 0, b.err
	}
	return b.r.Read(p)
}

func (b *errBody) Close() error { return nil }

// The error event follows a cut, in reads as small as one byte; it is not written when
// the client went away (its context ended, a write failed: nobody reads it) nor when the
// stream ended well.
func TestErrorEventOnlyForAClient(t *testing.T) {
	cut := errors.New("unexpected EOF")
	tests := []struct {
		name      string
		err       error
		ctxDone   bool
		gone      bool
		wantEvent bool
	}{
		{"cut", cut, false, false, true},
		{"stall", &timeoutError{backend: "b0", what: "sent nothing mid-response for", d: 1}, false, false, true},
		{"drain", errDrainCut, false, false, true},
		{"ended well", io.EOF, false, false, false},
		{"client context ended", cut, true, false, false},
		{"client write failed", cut, false, true, false},
		{"client cancelled", context.Canceled, false, false, false},
	}
	for _, tt := range tests {
		for _, chunk := range []int{1, 7, 32 << 10} {
			ctx, cancel := context.WithCancel(context.Background())
			if tt.ctxDone {
				cancel()
			}
			st := &route{in: httptest.NewRequestWithContext(ctx, "POST", "/v1/chat/completions", nil)}
			st.ow.gone = tt.gone
			b := &leaseBody{ReadCloser: &errBody{r: bytes.NewReader([]byte("data: {}\n\ndata: {")), err: tt.err}, st: st, sse: true}
			b.end.on = true
			var out []byte
			var err error
			for err == nil {
				p := make([]byte, chunk)
				var n int
				n, err = b.Read(p)
				out = append(out, p[:n]...)
			}
			cancel()
			if err != tt.err {
				t.Fatalf("%s, reads of %d: error %v, want %v", tt.name, chunk, err, tt.err)
			}
			got := strings.Contains(string(out), "event: error\n")
			if got != tt.wantEvent {
				t.Fatalf("%s, reads of %d: event %v, want %v: %q", tt.name, chunk, got, tt.wantEvent, out)
			}
			if got && !strings.HasPrefix(string(out), "data: {}\n\ndata: {\n\nevent: error\ndata: {\"type\":\"error\"") {
				t.Fatalf("%s, reads of %d: %q", tt.name, chunk, out)
			}
			if st.ow.shut != (tt.err == errDrainCut) {
				t.Fatalf("%s: drain cut marked %v", tt.name, st.ow.shut)
			}
		}
	}
}
