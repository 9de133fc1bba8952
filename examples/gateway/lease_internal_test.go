package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// nopBody is a response body over a byte slice that reads at most chunk bytes per Read.
type nopBody struct {
	r     *bytes.Reader
	chunk int
}

func (b *nopBody) Read(p []byte) (int, error) {
	if len(p) > b.chunk {
		p = p[:b.chunk]
	}
	return b.r.Read(p)
}

func (b *nopBody) Close() error { return nil }

const sseStream = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n" +
	"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1200,\"completion_tokens\":8,\"prompt_tokens_details\":{\"cached_tokens\":1024}}}\r\n\r\n" +
	"data: [DONE]\n\n"

// FuzzSSEUsage: whatever the stream and however it is split into reads, scanning never
// panics; the well-formed stream's usage is found at every split.
func FuzzSSEUsage(f *testing.F) {
	f.Add([]byte(sseStream), 1)
	f.Add([]byte(sseStream), 7)
	f.Add([]byte("data: {\"usage\":"), 3)
	f.Add([]byte("\n\n\ndata:\"usage\"\n"), 2)
	f.Fuzz(func(t *testing.T, data []byte, chunk int) {
		chunk = 1 + (chunk&0xffff)%64
		got := readSSE(t, data, chunk)
		if bytes.Equal(data, []byte(sseStream)) && (got.PromptTokens != 1200 || got.PromptTokensDetails.CachedTokens != 1024) {
			t.Fatalf("chunk %d: usage %+v", chunk, got)
		}
	})
}

func TestSSEUsageEverySplit(t *testing.T) {
	for chunk := 1; chunk <= len(sseStream); chunk++ {
		got := readSSE(t, []byte(sseStream), chunk)
		if got.PromptTokens != 1200 || got.CompletionTokens != 8 || got.PromptTokensDetails.CachedTokens != 1024 {
			t.Fatalf("chunk %d: usage %+v", chunk, got)
		}
	}
}

// readSSE reads data through a leaseBody in reads of chunk bytes and returns the usage it
// would report.
func readSSE(t *testing.T, data []byte, chunk int) usage {
	t.Helper()
	b := &leaseBody{ReadCloser: &nopBody{r: bytes.NewReader(data), chunk: chunk}, st: &route{}, sse: true}
	if _, err := io.Copy(io.Discard, b); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.last) == 0 {
		return usage{}
	}
	return usageOf(b.last)
}

// A JSON body that streams through unread (inject_metadata off, or too large to rewrite)
// still reports its usage: the last "usage" object in its tail, whatever the read sizes.
func TestJSONTailUsage(t *testing.T) {
	long := bytes.Repeat([]byte("x"), 3*maxJSONTail)
	body := []byte(`{"id":"c1","choices":[{"message":{"content":"the \"usage\": field is ` + string(long) +
		`"}}],"usage":{"prompt_tokens":900,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":768}}}`)
	for _, chunk := range []int{1, 7, 512, maxJSONTail, len(body)} {
		b := &leaseBody{ReadCloser: &nopBody{r: bytes.NewReader(body), chunk: chunk}, st: &route{}, json: true}
		if _, err := io.Copy(io.Discard, b); err != nil {
			t.Fatal(err)
		}
		b.mu.Lock()
		got := usageInTail(b.tail)
		n := len(b.tail)
		b.mu.Unlock()
		if got.PromptTokens != 900 || got.PromptTokensDetails.CachedTokens != 768 || got.CompletionTokens != 5 {
			t.Fatalf("chunk %d: usage %+v", chunk, got)
		}
		if n > 2*maxJSONTail {
			t.Fatalf("chunk %d: kept %d bytes", chunk, n)
		}
	}
	if u := usageInTail([]byte(`{"no":"usage here"}`)); u != (usage{}) {
		t.Fatalf("no usage: got %+v", u)
	}
}

// usageOf scans for the usage object without decoding, and agrees with decoding it into
// usage with encoding/json: malformed counts give the zero usage. One difference: a
// negative count (no server sends one) is malformed to the scan.
func TestUsageOf(t *testing.T) {
	for _, tc := range []struct {
		body string
		want usage
	}{
		{`{"usage":{"prompt_tokens":812,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":800}}}`,
			usage{PromptTokens: 812, CompletionTokens: 4, PromptTokensDetails: struct {
				CachedTokens int64 `json:"cached_tokens"`
			}{800}}},
		{` {"id":"x","usage" : { "completion_tokens" : 7 , "prompt_tokens":null} }`, usage{CompletionTokens: 7}},
		{`{"usage":{"prompt_tokens":1,"prompt_tokens_details":null}}`, usage{PromptTokens: 1}},
		{`{"choices":[{"usage":{"prompt_tokens":5}}]}`, usage{}}, // not top-level
		{`{"usage":null}`, usage{}},
		{`{"usage":{"prompt_tokens":1.5}}`, usage{}},
		{`{"usage":{"prompt_tokens":-1}}`, usage{}}, // encoding/json: -1
		{`{"usage":{"prompt_tokens":"12"}}`, usage{}},
		{`{"usage":{"prompt_tokens":12}`, usage{}}, // invalid JSON
		{`[1,2]`, usage{}},
		{``, usage{}},
	} {
		got := usageOf([]byte(tc.body))
		if got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.body, got, tc.want)
		}
		var v struct{ Usage *usage }
		if err := json.Unmarshal([]byte(tc.body), &v); err == nil && v.Usage != nil && *v.Usage != got && !strings.Contains(tc.body, "-") {
			t.Errorf("%s: encoding/json decodes %+v, scan %+v", tc.body, *v.Usage, got)
		}
	}
}
