package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestUsageAPIOf(t *testing.T) {
	for path, want := range map[string]usageAPI{
		"/v1/chat/completions": apiChat, "/v1/completions": apiChat, "/v1/embeddings": apiChat, "/": apiChat,
		"/v1/responses": apiResponses, "/v1/responses/": apiResponses, "/openai/v1/responses": apiResponses,
		"/v1/messages": apiMessages, "/v1/messages/": apiMessages, "/anthropic/v1/messages": apiMessages,
		"/v1/messages/count_tokens": apiChat, "/v1/responses/resp_1/cancel": apiChat,
	} {
		if got := usageAPIOf(path); got != want {
			t.Errorf("%s: %d, want %d", path, got, want)
		}
	}
}

// The Responses API's usage object (vLLM's ResponseUsage): input_tokens is the whole
// prompt, input_tokens_details.cached_tokens the cached part; the same absent/null rules
// as chat's prompt_tokens_details, and agreement with encoding/json (refResponses).
func TestUsageValueResponses(t *testing.T) {
	for _, tc := range []struct {
		body string
		want usage
	}{
		{body: `{"usage":{"input_tokens":1000,"input_tokens_details":{"cached_tokens":768},"output_tokens":5,` +
			`"output_tokens_details":{"reasoning_tokens":0},"total_tokens":1005}}`,
			want: usage{PromptTokens: 1000, CompletionTokens: 5, CachedTokens: 768, CachedReported: true}},
		{body: `{"usage":{"input_tokens":1000,"input_tokens_details":{"cached_tokens":0},"output_tokens":5}}`,
			want: usage{PromptTokens: 1000, CompletionTokens: 5, CachedReported: true}},
		{body: `{"usage":{"input_tokens":1000,"output_tokens":5}}`, want: usage{PromptTokens: 1000, CompletionTokens: 5}},
		{body: `{"usage":{"input_tokens":1000,"input_tokens_details":null}}`, want: usage{PromptTokens: 1000}},
		{body: `{"usage":{"input_tokens":1000,"input_tokens_details":{"cached_tokens":null}}}`, want: usage{PromptTokens: 1000}},
		{body: `{"usage":{"input_tokens":1000,"input_tokens_details":{}}}`, want: usage{PromptTokens: 1000}},
		{body: `{"usage":{"input_tokens":"1000"}}`, want: usage{}},
		{body: `{"usage":{"input_tokens":1000,"input_tokens_details":{"cached_tokens":1.5}}}`, want: usage{}},
		{body: `{"usage":null}`, want: usage{}},
		// The chat names mean nothing here.
		{body: `{"usage":{"prompt_tokens":1000,"prompt_tokens_details":{"cached_tokens":768}}}`, want: usage{}},
		// Streaming: nested under "response"; a top-level usage wins.
		{body: `{"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","status":"completed",` +
			`"output":[{"type":"message","content":[{"type":"output_text","text":"the \"usage\" is"}]}],` +
			`"usage":{"input_tokens":4096,"input_tokens_details":{"cached_tokens":4000},"output_tokens":12}}}`,
			want: usage{PromptTokens: 4096, CompletionTokens: 12, CachedTokens: 4000, CachedReported: true}},
		{body: `{"type":"response.created","response":{"id":"resp_1","status":"in_progress","output":[],"usage":null}}`, want: usage{}},
		{body: `{"type":"response.output_text.delta","delta":"usage"}`, want: usage{}},
		{body: `{"usage":{"input_tokens":1},"response":{"usage":{"input_tokens":2}}}`, want: usage{PromptTokens: 1}},
		{body: `{"response":"usage"}`, want: usage{}},
	} {
		got := usageOf([]byte(tc.body), apiResponses)
		if got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.body, got, tc.want)
		}
		var v struct{ Usage *refResponses }
		if err := json.Unmarshal([]byte(tc.body), &v); err == nil && v.Usage != nil && v.Usage.usage() != got {
			t.Errorf("%s: encoding/json decodes %+v, scan %+v", tc.body, v.Usage.usage(), got)
		}
	}
}

// The Anthropic Messages API's usage object: prompt = input_tokens +
// cache_read_input_tokens + cache_creation_input_tokens, cached = cache_read_input_tokens
// (reported only when it is a number). vLLM before its cache-usage fix (and now without
// --enable-prompt-tokens-details) omits the cache fields and puts the whole prompt in
// input_tokens; since the fix it sends input_tokens = prompt - cached, the cached count
// as cache_read_input_tokens and cache_creation_input_tokens 0.
func TestUsageValueMessages(t *testing.T) {
	for _, tc := range []struct {
		body string
		want usage
	}{
		{body: `{"usage":{"input_tokens":100,"output_tokens":5,"cache_read_input_tokens":900,"cache_creation_input_tokens":24}}`,
			want: usage{PromptTokens: 1024, CompletionTokens: 5, CachedTokens: 900, CachedReported: true}},
		{body: `{"usage":{"input_tokens":124,"output_tokens":5,"cache_read_input_tokens":900,"cache_creation_input_tokens":0}}`,
			want: usage{PromptTokens: 1024, CompletionTokens: 5, CachedTokens: 900, CachedReported: true}}, // vLLM, fixed
		{body: `{"usage":{"input_tokens":1024,"output_tokens":5}}`, want: usage{PromptTokens: 1024, CompletionTokens: 5}}, // vLLM, before
		{body: `{"usage":{"input_tokens":1024,"output_tokens":5,"cache_read_input_tokens":null,"cache_creation_input_tokens":null}}`,
			want: usage{PromptTokens: 1024, CompletionTokens: 5}},
		{body: `{"usage":{"input_tokens":1024,"cache_read_input_tokens":0,"cache_creation_input_tokens":0}}`,
			want: usage{PromptTokens: 1024, CachedReported: true}},
		{body: `{"usage":{"input_tokens":24,"cache_creation_input_tokens":1000}}`, want: usage{PromptTokens: 1024}},
		{body: `{"usage":{"input_tokens":24,"cache_read_input_tokens":"1000"}}`, want: usage{}},
		{body: `{"usage":{"input_tokens":-24}}`, want: usage{}},
		{body: `{"usage":[]}`, want: usage{}},
		// A count over 2^32 is no real count: malformed (a hostile backend's 1e18 pushed
		// the totals toward overflow).
		{body: `{"usage":{"input_tokens":999999999999999999,"cache_read_input_tokens":999999999999999999}}`, want: usage{}},
		{body: `{"usage":{"input_tokens":4294967296,"cache_read_input_tokens":0}}`,
			want: usage{PromptTokens: 1 << 32, CachedReported: true}},
		{body: `{"usage":{"input_tokens":4294967297}}`, want: usage{}},
		// The chat names mean nothing here.
		{body: `{"usage":{"prompt_tokens":1000,"prompt_tokens_details":{"cached_tokens":768}}}`, want: usage{}},
		// Streaming: message_start nests it under "message"; message_delta has it on top.
		{body: `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m",` +
			`"usage":{"input_tokens":100,"cache_read_input_tokens":900,"cache_creation_input_tokens":24,"output_tokens":1}}}`,
			want: usage{PromptTokens: 1024, CompletionTokens: 1, CachedTokens: 900, CachedReported: true}},
		{body: `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}`, want: usage{CompletionTokens: 5}},
	} {
		got := usageOf([]byte(tc.body), apiMessages)
		if got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.body, got, tc.want)
		}
		var v struct{ Usage *refMessages }
		// A negative count (no server sends one) is malformed to the scan, as for chat,
		// and so is one over maxTokenCount.
		if err := json.Unmarshal([]byte(tc.body), &v); err == nil && v.Usage != nil && v.Usage.usage() != got &&
			!strings.Contains(tc.body, "-") && !overMaxCount(tc.body) {
			t.Errorf("%s: encoding/json decodes %+v, scan %+v", tc.body, v.Usage.usage(), got)
		}
	}
}

// A chat/completions body's usage is read as before, whatever else the object nests.
func TestUsageValueChatIgnoresNested(t *testing.T) {
	for _, body := range []string{
		`{"response":{"usage":{"prompt_tokens":5}}}`,
		`{"message":{"usage":{"prompt_tokens":5}}}`,
	} {
		if got := usageOf([]byte(body), apiChat); got != (usage{}) {
			t.Errorf("%s: %+v", body, got)
		}
	}
}

// refResponses is the Responses usage object as encoding/json decodes it.
type refResponses struct {
	InputTokens        int64 `json:"input_tokens"`
	OutputTokens       int64 `json:"output_tokens"`
	InputTokensDetails *struct {
		CachedTokens *int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

func (r *refResponses) usage() usage {
	u := usage{PromptTokens: r.InputTokens, CompletionTokens: r.OutputTokens}
	if d := r.InputTokensDetails; d != nil && d.CachedTokens != nil {
		u.CachedTokens, u.CachedReported = *d.CachedTokens, true
	}
	return u
}

// refMessages is the Anthropic usage object as encoding/json decodes it.
type refMessages struct {
	InputTokens  int64  `json:"input_tokens"`
	OutputTokens int64  `json:"output_tokens"`
	CacheRead    *int64 `json:"cache_read_input_tokens"`
	CacheCreate  *int64 `json:"cache_creation_input_tokens"`
}

func (r *refMessages) usage() usage {
	u := usage{PromptTokens: r.InputTokens, CompletionTokens: r.OutputTokens}
	if r.CacheCreate != nil {
		u.PromptTokens += *r.CacheCreate
	}
	if r.CacheRead != nil {
		u.PromptTokens += *r.CacheRead
		u.CachedTokens, u.CachedReported = *r.CacheRead, true
	}
	return u
}

// Event streams as the servers send them, each with the usage the lease must get.
var apiStreams = []struct {
	name   string
	api    usageAPI
	stream string
	want   usage
}{
	{name: "responses", api: apiResponses, // vLLM's /v1/responses, stream: true
		stream: "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\",\"output\":[],\"usage\":null}}\n\n" +
			"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"delta\":\"hi\"}\n\n" +
			"event: response.completed\r\ndata: {\"type\":\"response.completed\",\"sequence_number\":2,\"response\":{\"id\":\"resp_1\",\"status\":\"completed\"," +
			"\"output\":[{\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"hi\"}]}]," +
			"\"usage\":{\"input_tokens\":4096,\"input_tokens_details\":{\"cached_tokens\":4000},\"output_tokens\":12,\"total_tokens\":4108}}}\r\n\r\n",
		want: usage{PromptTokens: 4096, CompletionTokens: 12, CachedTokens: 4000, CachedReported: true}},
	{name: "messages/anthropic", api: apiMessages, // Anthropic: prompt counts in message_start, output in message_delta
		stream: "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"content\":[],\"model\":\"m\"," +
			"\"usage\":{\"input_tokens\":100,\"cache_creation_input_tokens\":24,\"cache_read_input_tokens\":900,\"output_tokens\":1}}}\n\n" +
			"event: ping\ndata: {\"type\": \"ping\"}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
		want: usage{PromptTokens: 1024, CompletionTokens: 15, CachedTokens: 900, CachedReported: true}},
	{name: "messages/vllm", api: apiMessages, // vLLM since its cache-usage fix: cache counts only in message_delta
		stream: "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"content\":[],\"model\":\"m\"," +
			"\"usage\":{\"input_tokens\":1024,\"output_tokens\":0}}}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"input_tokens\":124," +
			"\"output_tokens\":15,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":900}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
		want: usage{PromptTokens: 1024, CompletionTokens: 15, CachedTokens: 900, CachedReported: true}},
	{name: "messages/vllm-unreported", api: apiMessages, // vLLM before the fix, or without prompt details
		stream: "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"content\":[],\"model\":\"m\"," +
			"\"usage\":{\"input_tokens\":1024,\"output_tokens\":0}}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"input_tokens\":1024,\"output_tokens\":15}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
		want: usage{PromptTokens: 1024, CompletionTokens: 15}},
	{name: "messages/cut-after-start", api: apiMessages, // the stream ended before message_delta
		stream: "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"content\":[],\"model\":\"m\"," +
			"\"usage\":{\"input_tokens\":100,\"cache_read_input_tokens\":924,\"output_tokens\":1}}}\n\n",
		want: usage{PromptTokens: 1024, CompletionTokens: 1, CachedTokens: 924, CachedReported: true}},
}

// Each API's event stream gives its usage at every split into reads.
func TestSSEUsageEverySplitAPIs(t *testing.T) {
	for _, tc := range apiStreams {
		t.Run(tc.name, func(t *testing.T) {
			for chunk := 1; chunk <= len(tc.stream); chunk++ {
				got := readUsage(t, &leaseBody{ReadCloser: &nopBody{r: bytes.NewReader([]byte(tc.stream)), chunk: chunk},
					st: &route{}, sse: true, api: tc.api})
				if got != tc.want {
					t.Fatalf("chunk %d: usage %+v, want %+v", chunk, got, tc.want)
				}
			}
		})
	}
}

// JSON bodies of the Responses and Messages APIs, read whole (usageOf over the body, as
// modifyResponse does with scanJSON's top-level usage) and streamed through (the tail).
func TestJSONUsageAPIs(t *testing.T) {
	long := string(bytes.Repeat([]byte("x"), 3*maxJSONTail))
	for _, tc := range []struct {
		name string
		api  usageAPI
		body string
		want usage
	}{
		{name: "responses", api: apiResponses,
			body: `{"id":"resp_1","object":"response","output":[{"type":"message","content":[{"type":"output_text","text":"` + long + `"}]}],` +
				`"status":"completed","usage":{"input_tokens":2048,"input_tokens_details":{"cached_tokens":1536},"output_tokens":7,` +
				`"output_tokens_details":{"reasoning_tokens":0},"total_tokens":2055},"user":null}`,
			want: usage{PromptTokens: 2048, CompletionTokens: 7, CachedTokens: 1536, CachedReported: true}},
		{name: "messages", api: apiMessages,
			body: `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"` + long + `"}],"model":"m",` +
				`"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":48,"output_tokens":7,` +
				`"cache_read_input_tokens":2000,"cache_creation_input_tokens":0},"kv_transfer_params":null}`,
			want: usage{PromptTokens: 2048, CompletionTokens: 7, CachedTokens: 2000, CachedReported: true}},
		{name: "messages-unreported", api: apiMessages,
			body: `{"id":"msg_1","type":"message","content":[],"model":"m","usage":{"input_tokens":2048,"output_tokens":7}}`,
			want: usage{PromptTokens: 2048, CompletionTokens: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top, obj, _ := scanJSON([]byte(tc.body))
			if !obj {
				t.Fatal("not a JSON object")
			}
			if got := usageValue(top.usage, tc.api); got != tc.want {
				t.Fatalf("read whole: %+v, want %+v", got, tc.want)
			}
			for _, chunk := range []int{1, 7, 512, len(tc.body)} {
				got := readUsage(t, &leaseBody{ReadCloser: &nopBody{r: bytes.NewReader([]byte(tc.body)), chunk: chunk},
					st: &route{}, json: true, api: tc.api})
				if got != tc.want {
					t.Fatalf("tail, chunk %d: %+v, want %+v", chunk, got, tc.want)
				}
			}
		})
	}
}

// Reading the usage allocates nothing, in every API's shape.
func TestUsageOfAllocs(t *testing.T) {
	for _, tc := range apiStreams {
		lines := bytes.Split([]byte(tc.stream), []byte("\n"))
		var first, last []byte
		for _, l := range lines {
			if d, ok := bytes.CutPrefix(bytes.TrimSpace(l), []byte("data:")); ok && bytes.Contains(d, []byte(`"usage"`)) {
				if first == nil {
					first = bytes.TrimSpace(d)
				}
				last = bytes.TrimSpace(d)
			}
		}
		if n := testing.AllocsPerRun(100, func() {
			_ = usageOf(last, tc.api)
			_ = messagesStreamUsage(first, last)
		}); n != 0 {
			t.Errorf("%s: %v allocs", tc.name, n)
		}
	}
}

// overMaxCount reports whether body holds a number above maxTokenCount.
func overMaxCount(body string) bool {
	for _, f := range regexp.MustCompile(`[0-9]+`).FindAllString(body, -1) {
		if n, err := strconv.ParseUint(f, 10, 64); err != nil || n > maxTokenCount {
			return true
		}
	}
	return false
}

// readUsage reads b to its end and returns the usage it found.
func readUsage(t *testing.T, b *leaseBody) usage {
	t.Helper()
	if _, err := io.Copy(io.Discard, b); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.usage()
}
