package gateway

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// checkScan compares scanJSON with json.Valid and, for objects, with member and with
// encoding/json decoding into a map (the references for the top-level members: of
// duplicate keys the last wins).
func checkScan(t *testing.T, data []byte) {
	t.Helper()
	top, obj, valid := scanJSON(data)
	if want := json.Valid(data); valid != want {
		t.Fatalf("scanJSON(%q): valid %v, json.Valid %v", data, valid, want)
	}
	i := skipWS(data, 0)
	if wantObj := valid && data[i] == '{'; obj != wantObj {
		t.Fatalf("scanJSON(%q): object %v, want %v", data, obj, wantObj)
	}
	if !obj {
		return
	}
	if top.open != i {
		t.Fatalf("scanJSON(%q): open %d, want %d", data, top.open, i)
	}
	for _, m := range []struct {
		key string
		got []byte
	}{{"model", top.model}, {"usage", top.usage}, {"stream", top.stream}, {"stream_options", top.streamOpts}} {
		v, found := member(data, i, m.key)
		if found != (m.got != nil) || !bytes.Equal(v, m.got) {
			t.Fatalf("scanJSON(%q): %s = %q, member says %q (found %v)", data, m.key, m.got, v, found)
		}
	}
	var ref map[string]json.RawMessage
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatalf("scanJSON(%q): an object, json.Unmarshal says %v", data, err)
	}
	for _, m := range []struct {
		key string
		got []byte
	}{{"model", top.model}, {"usage", top.usage}, {"stream", top.stream}, {"stream_options", top.streamOpts}} {
		v, found := ref[m.key]
		if found != (m.got != nil) || !bytes.Equal(v, m.got) {
			t.Fatalf("scanJSON(%q): %s = %q, encoding/json says %q (found %v)", data, m.key, m.got, v, found)
		}
	}
	if o := top.streamOpts; o != nil && cap(data)-top.streamOptsAt != cap(o) {
		t.Fatalf("scanJSON(%q): stream_options at %d, its value at %d", data, top.streamOptsAt, cap(data)-cap(o))
	}
	if data[top.close] != '}' || skipWS(data, top.close+1) != len(data) {
		t.Fatalf("scanJSON(%q): close %d is not the object's '}'", data, top.close)
	}
	if _, found := member(data, i, MetadataKey); found != top.meta {
		t.Fatalf("scanJSON(%q): meta %v, member says %v", data, top.meta, found)
	}
}

var scanCases = []string{
	``, ` `, `{`, `}`, `{}`, ` {} `, `[]`, `[ ]`, `{ }`, `[1,]`, `{"a":1,}`, `{"a"}`, `{"a":}`, `{,}`, `[,1]`,
	`null`, `nul`, `nullx`, `true`, `false`, `tru`, `"a"`, `"a`, `"\u00e9"`, `"\u00g9"`, `"\x"`, `"\/"`, "\"\x01\"",
	"\"\x7f\xff\"", `0`, `-0`, `01`, `-`, `1.`, `1.5`, `.5`, `1e`, `1e+`, `1e+5`, `1E-05`, `-1.5e300`, `1 2`,
	`{"model":"m"}`, `{"model":"m","model":"n"}`, `{"model":"x","model":"big"}`, `{"model":"\u0078","model":"big"}`,
	`{"model":null,"model":"big"}`, `{"model":"big","model":null}`, `{"usage":{"prompt_tokens":1},"usage":{"prompt_tokens":2}}`,
	`{"Model":"m"}`, `{"\u006dodel":"esc"}`, `{"mod\"el":1}`, `{"a":{"model":"inner"}}`,
	`{"usage":{"prompt_tokens":8,"completion_tokens":1}}`, `{"usage":null}`, `{"choices":[{"usage":1}],"usage":[]}`,
	`{"x_agent_serve":{}}`, `{"a":[{"x_agent_serve":1}]}`, `{"x_agent_serv\u0065":true}`, `{"model":[],"usage":{}}`,
	"{\"a\":\"line\nbreak\"}", "{\t\"model\"\r\n:\n\"m\" }", `{"a":1}x`, `{"a":1}}`, `[{"model":"m"}]`,
	`{"model":"0123456789abcdef0123456789abcdef\\"}`, `{"k":"0123456789abcdef0123456789abcde"}`,
	`{"stream":true,"stream_options":{"include_usage":true}}`, `{"stream":true,"stream":false,"stream_options":null}`,
	`{"stre\u0061m":1,"a":{"stream":2}, "stream_options" : [] }`, ` {  } `,
}

func TestScanJSON(t *testing.T) {
	for _, c := range scanCases {
		checkScan(t, []byte(c))
	}
	// encoding/json's nesting bound: 10000 levels are valid, 10001 are not.
	for _, d := range []int{maxJSONDepth - 1, maxJSONDepth, maxJSONDepth + 1} {
		for _, open := range []string{"[", `{"a":`} {
			closer := map[string]string{"[": "]", `{"a":`: "}"}[open]
			checkScan(t, []byte(strings.Repeat(open, d)+strings.Repeat(closer, d)))
			checkScan(t, []byte(strings.Repeat(open, d-1)+"{}"+strings.Repeat(closer, d-1)))
			checkScan(t, []byte(strings.Repeat(open, d-1)+"[]"+strings.Repeat(closer, d-1)))
		}
	}
}

// FuzzScanJSON: scanJSON agrees with json.Valid on validity and with member on the
// top-level members it reports.
func FuzzScanJSON(f *testing.F) {
	for _, c := range scanCases {
		f.Add([]byte(c))
	}
	f.Add([]byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"m",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"ok \"quoted\" \\ \u00e9"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":812,"completion_tokens":4,"total_tokens":816,"prompt_tokens_details":{"cached_tokens":800}}}`))
	f.Fuzz(func(t *testing.T, data []byte) { checkScan(t, data) })
}

// BenchmarkScanJSON: the one-pass scan of a chat completion response against
// encoding/json's json.Valid alone (which the scan replaces, with the key scans after it).
func BenchmarkScanJSON(b *testing.B) {
	resp := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"m",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"[fakevllm simulator] ok"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":812,"completion_tokens":4,"total_tokens":816,"prompt_tokens_details":{"cached_tokens":800}}}`)
	req := []byte(`{"model":"m","max_tokens":4,"messages":[{"role":"system","content":"` +
		strings.Repeat("You are a careful coding agent. ", 100) + `"},{"role":"user","content":"run the tests"}]}`)
	for _, tc := range []struct {
		name string
		body []byte
	}{{"response", resp}, {"request", req}} {
		b.Run(tc.name+"/scanJSON", func(b *testing.B) {
			b.SetBytes(int64(len(tc.body)))
			for b.Loop() {
				if _, obj, _ := scanJSON(tc.body); !obj {
					b.Fatal("not an object")
				}
			}
		})
		b.Run(tc.name+"/json.Valid", func(b *testing.B) {
			b.SetBytes(int64(len(tc.body)))
			for b.Loop() {
				if !json.Valid(tc.body) {
					b.Fatal("invalid")
				}
			}
		})
	}
}
