package gateway

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// vllmEvents is a vLLM chat stream with stream_options.include_usage: the role chunk,
// two tokens, the finish chunk, the usage-only chunk (index 4) and [DONE]; OpenAI's
// shape adds "usage": null to the other chunks.
func vllmEvents(openAI bool) []string {
	null := ""
	if openAI {
		null = `,"usage":null`
	}
	head := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",`
	return []string{
		head + `"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]` + null + "}\n\n",
		head + `"choices":[{"index":0,"delta":{"content":"usage"},"logprobs":null,"finish_reason":null}]` + null + "}\n\n",
		head + `"choices":[{"index":0,"delta":{"content":" ok"},"logprobs":null,"finish_reason":null}]` + null + "}\n\n",
		head + `"choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null}]` + null + "}\n\n",
		head + `"choices":[],"usage":{"prompt_tokens":1200,"total_tokens":1208,"completion_tokens":8,"prompt_tokens_details":{"cached_tokens":1024}}}` + "\n\n",
		"data: [DONE]\n\n",
	}
}

// eol rewrites the line ends of s to end.
func eol(s, end string) string { return strings.ReplaceAll(s, "\n", end) }

// readDrop reads data through a leaseBody with the usage filter on, the backend
// returning at most chunk bytes per Read and the caller reading with a buffer of size
// buf, and returns what the client gets and the usage the lease would report.
func readDrop(t testing.TB, data []byte, chunk, buf int) ([]byte, usage) {
	t.Helper()
	b := &leaseBody{ReadCloser: &nopBody{r: bytes.NewReader(data), chunk: chunk}, st: &route{}, sse: true}
	b.drop.on = true
	var out []byte
	p := make([]byte, buf)
	for range 4*len(data) + 4 {
		n, err := b.Read(p)
		if n < 0 || n > len(p) {
			t.Fatalf("Read returned %d of %d", n, len(p))
		}
		out = append(out, p[:n]...)
		if err == io.EOF {
			b.mu.Lock()
			defer b.mu.Unlock()
			return out, b.usage()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("no EOF")
	return nil, usage{}
}

// The usage-only event is taken out and every other byte forwarded in order, whatever
// the line ends and however the backend's reads split the stream; the usage reaches the
// lease all the same.
func TestUsageDropEverySplit(t *testing.T) {
	want := usage{PromptTokens: 1200, CompletionTokens: 8, CachedTokens: 1024, CachedReported: true}
	for _, end := range []string{"\n", "\r\n", "\r"} {
		for _, openAI := range []bool{false, true} {
			events := vllmEvents(openAI)
			in := eol(strings.Join(events, ""), end)
			exp := eol(strings.Join(events[:4], "")+events[5], end)
			for chunk := 1; chunk <= len(in); chunk++ {
				got, u := readDrop(t, []byte(in), chunk, 32<<10)
				if string(got) != exp {
					t.Fatalf("end %q openAI %v chunk %d:\n got %q\nwant %q", end, openAI, chunk, got, exp)
				}
				if end != "\r" && u != want { // the lease's reader takes LF and CRLF lines only
					t.Fatalf("end %q chunk %d: usage %+v", end, chunk, u)
				}
			}
		}
	}
}

// What is not the usage-only event of one data line passes byte for byte.
func TestUsageDropKeeps(t *testing.T) {
	usageLine := `data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1}}`
	for _, tt := range []struct{ name, in, want string }{
		{"no usage chunk (backend ignored the option)", strings.Join(vllmEvents(false)[:4], "") + "data: [DONE]\n\n", ""},
		{"usage null", `data: {"choices":[],"usage":null}` + "\n\n", ""},
		{"choices not empty", `data: {"choices":[{"index":0}],"usage":{"prompt_tokens":5}}` + "\n\n", ""},
		{"choices absent", `data: {"usage":{"prompt_tokens":5}}` + "\n\n", ""},
		{"with an event field", "event: usage\n" + usageLine + "\n\n", ""},
		{"with an id", usageLine + "\nid: 7\n\n", ""},
		{"two data lines", usageLine + "\ndata: x\n\n", ""},
		{"comment", ": " + usageLine + "\n\n", ""},
		{"unfinished at the end", usageLine + "\n", ""},
		{"unfinished, no line end", usageLine, ""},
		{"blank lines", "\n\n\r\n\r\r\n", ""},
		{"not JSON", `data: {"choices":[],"usage":{` + "\n\n", ""},
		{"dropped", "\n" + usageLine + "\n\n\n", "\n\n"},
		{"no space", `data:{"choices":[ ],"usage":{}}` + "\n\ndata: [DONE]\n\n", "data: [DONE]\n\n"},
		{"last of duplicate choices", `data: {"choices":[],"choices":[{}],"usage":1}` + "\r\n\r\n", ""},
		{"last of duplicate choices, dropped", `data: {"choices":[{}],"choices":[],"usage":1}` + "\r\n\r\ndata: [DONE]\r\n\r\n", "data: [DONE]\r\n\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.want
			if want == "" {
				want = tt.in
			}
			for chunk := 1; chunk <= len(tt.in); chunk++ {
				if got, _ := readDrop(t, []byte(tt.in), chunk, 32<<10); string(got) != want {
					t.Fatalf("chunk %d:\n got %q\nwant %q", chunk, got, want)
				}
			}
		})
	}
}

// An event still incomplete past maxHeldEvent bytes, or past half the caller's buffer,
// is forwarded as it comes (unchecked): nothing is lost, nothing waits for it.
func TestUsageDropLongEvent(t *testing.T) {
	long := "data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("x", 3*maxHeldEvent) + "\"}}]}\n\n"
	in := long + strings.Join(vllmEvents(false), "")
	exp := long + strings.Join(vllmEvents(false)[:4], "") + vllmEvents(false)[5]
	for _, chunk := range []int{1, 100, 1000, maxHeldEvent + 1, len(in)} {
		if got, _ := readDrop(t, []byte(in), chunk, 32<<10); string(got) != exp {
			t.Fatalf("chunk %d: got %d bytes, want %d", chunk, len(got), len(exp))
		}
	}
	// A caller's buffer too small to hold the usage event: it passes, and so does the rest.
	in = strings.Join(vllmEvents(false), "")
	for _, buf := range []int{1, 2, 64, 150} {
		if got, _ := readDrop(t, []byte(in), 7, buf); len(got) < len(in)-len(vllmEvents(false)[4]) || !strings.HasSuffix(string(got), "data: [DONE]\n\n") {
			t.Fatalf("buffer %d: got %q", buf, got)
		}
	}
}

// usageOnlyEvent is the reference of the filter's test on a complete event ev (its
// lines and the blank line that ends it): one line, the usage-only chunk.
func usageOnlyEvent(ev []byte) bool {
	k := bytes.IndexAny(ev, "\r\n")
	if k < 0 {
		return false
	}
	for _, c := range ev[k:] { // the line's end and the blank line's: nothing else
		if c != '\r' && c != '\n' {
			return false
		}
	}
	return usageOnlyLine(ev[:k])
}

// refDrop splits data into events (lines ended by LF, CRLF or CR; an event ends with a
// blank line, its line ends included) and drops the usage-only ones; a last event left
// unfinished is kept (unfinished).
func refDrop(data []byte) (kept []byte, events [][]byte, unfinished bool) {
	start, content := 0, false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if c != '\r' && c != '\n' {
			content = true
			continue
		}
		if c == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		if content {
			content = false
			continue
		}
		events = append(events, data[start:i+1])
		start = i + 1
	}
	if unfinished = start < len(data); unfinished {
		events = append(events, data[start:])
	}
	for i, ev := range events {
		if i == len(events)-1 && unfinished || !usageOnlyEvent(ev) {
			kept = append(kept, ev...)
		}
	}
	return kept, events, unfinished
}

// FuzzUsageDrop: whatever the stream and the read sizes, the filter never panics and
// forwards the stream's events in order, whole, less some usage-only ones: exactly
// those (the reference) when no event is longer than it may hold.
func FuzzUsageDrop(f *testing.F) {
	for _, end := range []string{"\n", "\r\n", "\r"} {
		f.Add([]byte(eol(strings.Join(vllmEvents(true), ""), end)), 3, 1<<15)
	}
	f.Add([]byte("data: {\"choices\":[],\"usage\":{}}\r\r\ndata: {\"choices\":[],\"usage\":{}}\r"), 1, 64)
	f.Add([]byte("\r\n\r\n\n\r"), 1, 2)
	f.Fuzz(func(t *testing.T, data []byte, chunk, buf int) {
		chunk = 1 + (chunk&0xffff)%256
		buf = 1 + (buf&0xffff)%(64<<10)
		got, _ := readDrop(t, data, chunk, buf)
		ref, events, unfinished := refDrop(data)
		if len(data) <= maxHeldEvent && buf >= 2*maxHeldEvent+2 {
			if !bytes.Equal(got, ref) {
				t.Fatalf("chunk %d buf %d: %q\n got %q\nwant %q", chunk, buf, data, got, ref)
			}
			return
		}
		rest := got
		for i, ev := range events {
			if bytes.HasPrefix(rest, ev) {
				rest = rest[len(ev):]
			} else if i == len(events)-1 && unfinished || !usageOnlyEvent(ev) {
				t.Fatalf("chunk %d buf %d: %q: event %d %q lost; got %q", chunk, buf, data, i, ev, got)
			}
		}
		if len(rest) > 0 {
			t.Fatalf("chunk %d buf %d: %q: %q added", chunk, buf, data, rest)
		}
	})
}
