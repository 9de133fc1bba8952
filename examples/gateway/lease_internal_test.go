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
		if bytes.Equal(data, []byte(sseStream)) && (got.PromptTokens != 1200 || got.CachedTokens != 1024 || !got.CachedReported) {
			t.Fatalf("chunk %d: usage %+v", chunk, got)
		}
	})
}

func TestSSEUsageEverySplit(t *testing.T) {
	for chunk := 1; chunk <= len(sseStream); chunk++ {
		got := readSSE(t, []byte(sseStream), chunk)
		if got.PromptTokens != 1200 || got.CompletionTokens != 8 || got.CachedTokens != 1024 || !got.CachedReported {
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
	return b.usage()
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
		got := usageInTail(b.tail, apiChat)
		n := len(b.tail)
		b.mu.Unlock()
		if got.PromptTokens != 900 || got.CachedTokens != 768 || !got.CachedReported || got.CompletionTokens != 5 {
			t.Fatalf("chunk %d: usage %+v", chunk, got)
		}
		if n > 2*maxJSONTail {
			t.Fatalf("chunk %d: kept %d bytes", chunk, n)
		}
	}
	if u := usageInTail([]byte(`{"no":"usage here"}`), apiChat); u != (usage{}) {
		t.Fatalf("no usage: got %+v", u)
	}
}

// usageOf scans for the usage object without decoding, and agrees with decoding it with
// encoding/json (refUsage): malformed counts give the zero usage, and the cached count is
// reported exactly when prompt_tokens_details.cached_tokens is a number — absent details,
// null details, an empty details object and a null count are not reported (vLLM without
// --enable-prompt-tokens-details), a 0 is. One difference: a negative count (no server
// sends one) is malformed to the scan. usageInTail, the path of a JSON body that streams
// through, decodes the same way.
func TestUsageOf(t *testing.T) {
	for _, tc := range []struct {
		body string
		want usage
		// tailDiffers: usageInTail, which looks for the last "usage" key in a tail it
		// cannot parse from the start, reads a nested or unterminated one too.
		tailDiffers bool
	}{
		{body: `{"usage":{"prompt_tokens":812,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":800}}}`,
			want: usage{PromptTokens: 812, CompletionTokens: 4, CachedTokens: 800, CachedReported: true}},
		{body: `{"usage":{"prompt_tokens":812,"prompt_tokens_details":{"cached_tokens":0}}}`,
			want: usage{PromptTokens: 812, CachedReported: true}},
		{body: `{"usage":{"prompt_tokens":812,"completion_tokens":4}}`, want: usage{PromptTokens: 812, CompletionTokens: 4}},
		{body: `{"usage":{"prompt_tokens":812,"prompt_tokens_details":null}}`, want: usage{PromptTokens: 812}},
		{body: `{"usage":{"prompt_tokens":812,"prompt_tokens_details":{}}}`, want: usage{PromptTokens: 812}},
		{body: `{"usage":{"prompt_tokens":812,"prompt_tokens_details":{"cached_tokens":null}}}`, want: usage{PromptTokens: 812}},
		{body: `{"usage":{"prompt_tokens_details":{"cached_tokens":5},"prompt_tokens":812}}`,
			want: usage{PromptTokens: 812, CachedTokens: 5, CachedReported: true}},
		{body: `{"usage":{"prompt_tokens":812,"prompt_tokens_details":{"cached_tokens":"5"}}}`, want: usage{}},
		{body: ` {"id":"x","usage" : { "completion_tokens" : 7 , "prompt_tokens":null} }`, want: usage{CompletionTokens: 7}},
		{body: `{"choices":[{"usage":{"prompt_tokens":5}}]}`, want: usage{}, tailDiffers: true}, // not top-level
		{body: `{"usage":null}`, want: usage{}},
		{body: `{"usage":{"prompt_tokens":1.5}}`, want: usage{}},
		{body: `{"usage":{"prompt_tokens":-1}}`, want: usage{}}, // encoding/json: -1
		{body: `{"usage":{"prompt_tokens":"12"}}`, want: usage{}},
		{body: `{"usage":{"prompt_tokens":12}`, want: usage{}, tailDiffers: true}, // invalid JSON
		{body: `[1,2]`, want: usage{}},
		{body: ``, want: usage{}},
	} {
		got := usageOf([]byte(tc.body), apiChat)
		if got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.body, got, tc.want)
		}
		if tail := usageInTail([]byte(tc.body), apiChat); tail != got && !tc.tailDiffers {
			t.Errorf("%s: usageInTail %+v, usageOf %+v", tc.body, tail, got)
		}
		var v struct{ Usage *refUsage }
		if err := json.Unmarshal([]byte(tc.body), &v); err == nil && v.Usage != nil && v.Usage.usage() != got && !strings.Contains(tc.body, "-") {
			t.Errorf("%s: encoding/json decodes %+v, scan %+v", tc.body, v.Usage.usage(), got)
		}
	}
}

// refUsage is the usage object as encoding/json decodes it, with pointers for presence.
type refUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens *int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (r *refUsage) usage() usage {
	u := usage{PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens}
	if d := r.PromptTokensDetails; d != nil && d.CachedTokens != nil {
		u.CachedTokens, u.CachedReported = *d.CachedTokens, true
	}
	return u
}
