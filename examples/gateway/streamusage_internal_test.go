package gateway

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"testing"
)

// askUsage is streamUsageBody with stream_usage on, for a POST of body to path.
func askUsage(t testing.TB, path string, body []byte) ([]byte, bool) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	_, top, _ := parseModel(r, body)
	rt := &routing{cfg: Config{StreamUsage: true}}
	out, asked, err := rt.streamUsageBody(r, body, top, nil)
	if err != nil {
		t.Fatalf("%s %q: %v", path, body, err)
	}
	return out, asked
}

// The request rewrite: one member added or set, every other byte kept; the cases it
// leaves alone are left byte for byte.
func TestStreamUsageEdit(t *testing.T) {
	const iu = `"include_usage":true`
	for _, tt := range []struct{ name, in, want string }{ // want "": untouched
		{"absent", `{"model":"m","stream":true}`, `{"model":"m","stream":true,"stream_options":{` + iu + `}}`},
		{"absent, spaced", "{ \"stream\" : true ,\"n\":1 }\n", "{ \"stream\" : true ,\"n\":1,\"stream_options\":{" + iu + "} }\n"},
		{"stream last of duplicates", `{"stream":false,"stream":true}`, `{"stream":false,"stream":true,"stream_options":{` + iu + `}}`},
		{"escaped key", `{"stre\u0061m":true}`, `{"stre\u0061m":true,"stream_options":{` + iu + `}}`},
		{"null", `{"stream":true,"stream_options":null,"x":[]}`, `{"stream":true,"stream_options":{` + iu + `},"x":[]}`},
		{"empty object", `{"stream_options":{},"stream":true}`, `{"stream_options":{` + iu + `},"stream":true}`},
		{"empty object, spaced", `{"stream":true,"stream_options":{ }}`, `{"stream":true,"stream_options":{` + iu + ` }}`},
		{"other options", `{"stream":true,"stream_options":{"continuous_usage_stats":false} }`,
			`{"stream":true,"stream_options":{"continuous_usage_stats":false,` + iu + `} }`},
		{"false", `{"stream":true,"stream_options":{"include_usage":false,"a":1}}`, `{"stream":true,"stream_options":{` + iu + `,"a":1}}`},
		{"null value", `{"stream":true,"stream_options":{"include_usage" : null}}`, `{"stream":true,"stream_options":{"include_usage" : true}}`},
		{"last of duplicate options", `{"stream_options":{"include_usage":true},"stream":true,"stream_options":{"x":1}}`,
			`{"stream_options":{"include_usage":true},"stream":true,"stream_options":{"x":1,` + iu + `}}`},
		{"last of duplicate include_usage", `{"stream":true,"stream_options":{"include_usage":true,"include_usage":false}}`,
			`{"stream":true,"stream_options":{"include_usage":true,` + iu + `}}`},
		{"asked", `{"stream":true,"stream_options":{"include_usage":true}}`, ""},
		{"asked, spaced", `{"stream":true,"stream_options":{ "include_usage" : true }}`, ""},
		{"not a boolean", `{"stream":true,"stream_options":{"include_usage":"yes"}}`, ""},
		{"continuous stats", `{"stream":true,"stream_options":{"continuous_usage_stats":true}}`, ""},
		{"continuous stats, false", `{"stream":true,"stream_options":{"continuous_usage_stats":true,"include_usage":false}}`, ""},
		{"options an array", `{"stream":true,"stream_options":[]}`, ""},
		{"options a string", `{"stream":true,"stream_options":"include_usage"}`, ""},
		{"not streaming", `{"stream":false}`, ""},
		{"stream last false", `{"stream":true,"stream":false}`, ""},
		{"stream a string", `{"stream":"true"}`, ""},
		{"stream null", `{"stream":null}`, ""},
		{"no stream", `{"model":"m","messages":[]}`, ""},
		{"nested stream", `{"a":{"stream":true}}`, ""},
		{"not an object", `[{"stream":true}]`, ""},
		{"invalid", `{"stream":true`, ""},
		{"invalid after", `{"stream":true}}`, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/completions/"} {
				got, asked := askUsage(t, path, []byte(tt.in))
				if tt.want == "" {
					if asked || string(got) != tt.in {
						t.Fatalf("%s: %q -> %q (asked %v), want it untouched", path, tt.in, got, asked)
					}
					continue
				}
				if !asked || string(got) != tt.want {
					t.Fatalf("%s: %q -> %q (asked %v), want %q", path, tt.in, got, asked, tt.want)
				}
			}
			// Other paths and methods, and the key off: untouched.
			for _, path := range []string{"/v1/responses", "/v1/messages", "/v1/embeddings", "/v1/chat/completions/x"} {
				if got, asked := askUsage(t, path, []byte(tt.in)); asked || string(got) != tt.in {
					t.Fatalf("%s: %q -> %q, want it untouched", path, tt.in, got)
				}
			}
			r := httptest.NewRequest(http.MethodPut, "/v1/chat/completions", nil)
			_, top, _ := parseModel(r, []byte(tt.in))
			if got, asked, _ := (&routing{cfg: Config{StreamUsage: true}}).streamUsageBody(r, []byte(tt.in), top, nil); asked || string(got) != tt.in {
				t.Fatalf("PUT: %q -> %q, want it untouched", tt.in, got)
			}
			r = httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			_, top, _ = parseModel(r, []byte(tt.in))
			if got, asked, _ := (&routing{}).streamUsageBody(r, []byte(tt.in), top, nil); asked || string(got) != tt.in {
				t.Fatalf("stream_usage off: %q -> %q, want it untouched", tt.in, got)
			}
		})
	}
}

// The copy is charged before it is made; a refusal is errOverBudget.
func TestStreamUsageCharged(t *testing.T) {
	body := []byte(`{"stream":true}`)
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
	_, top, _ := parseModel(r, body)
	rt := &routing{cfg: Config{StreamUsage: true}}
	var charged int64
	out, asked, err := rt.streamUsageBody(r, body, top, func(n int64) bool { charged += n; return true })
	if err != nil || !asked || charged != int64(len(out)) || int64(cap(out)) != charged {
		t.Fatalf("charged %d for %d bytes (cap %d), asked %v, err %v", charged, len(out), cap(out), asked, err)
	}
	if _, _, err := rt.streamUsageBody(r, body, top, func(int64) bool { return false }); err != errOverBudget {
		t.Fatalf("refused charge: err %v, want errOverBudget", err)
	}
}

// refAsks is the reference of the rewrite's condition, by encoding/json (the last of
// duplicate keys wins, as in vLLM's Python json): whether a valid JSON object asks to
// stream and the gateway asks for its usage.
func refAsks(t *testing.T, data []byte) bool {
	var req map[string]json.RawMessage
	if json.Unmarshal(data, &req) != nil || string(req["stream"]) != "true" {
		return false
	}
	opts, found := req["stream_options"]
	if !found || string(opts) == "null" {
		return true
	}
	var o map[string]json.RawMessage
	if json.Unmarshal(opts, &o) != nil {
		return false // not an object
	}
	iu, found := o["include_usage"]
	if string(o["continuous_usage_stats"]) == "true" && string(iu) != "true" {
		return false
	}
	return !found || string(iu) == "false" || string(iu) == "null"
}

// FuzzStreamUsageEdit: the rewrite never panics, rewrites exactly the bodies the
// reference says, and turns a valid JSON object into a valid JSON object that asks for
// the usage and is otherwise the same document.
func FuzzStreamUsageEdit(f *testing.F) {
	for _, s := range []string{`{"stream":true}`, `{"stream":true,"stream_options":null}`, `{"stream":true,"stream_options":{}}`,
		`{"stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":true}}`, `{"stream":true,"stream_options":{"a":[1,{"b":"}"}]}}`,
		`{"stream_options":{"include_usage":null},"stream":true, "stream":true}`, `{"stre\u0061m":true,"stream_optio\u006es":{ }}`,
		`[{"stream":true}]`, `{"stream":true`, `{}`, ` { "stream" : true } `, `{"stream":true,"stream_options":{"include_usage":true}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, asked := askUsage(t, "/v1/chat/completions", data)
		if want := refAsks(t, data); asked != want {
			t.Fatalf("%q: asked %v, reference %v", data, asked, want)
		}
		if !asked {
			if !bytes.Equal(out, data) {
				t.Fatalf("%q changed to %q without asking", data, out)
			}
			return
		}
		var before, after map[string]json.RawMessage
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("%q -> %q: not a JSON object: %v", data, out, err)
		}
		_ = json.Unmarshal(data, &before)
		var opts map[string]json.RawMessage
		if err := json.Unmarshal(after["stream_options"], &opts); err != nil || string(opts["include_usage"]) != "true" {
			t.Fatalf("%q -> %q: stream_options %s", data, out, after["stream_options"])
		}
		var was map[string]json.RawMessage // the client's other options are kept
		if json.Unmarshal(before["stream_options"], &was) == nil {
			delete(was, "include_usage")
			delete(opts, "include_usage")
			if !maps.EqualFunc(was, opts, rawEqual) {
				t.Fatalf("%q -> %q: options %s -> %s", data, out, before["stream_options"], after["stream_options"])
			}
		}
		delete(before, "stream_options")
		delete(after, "stream_options")
		if !maps.EqualFunc(before, after, rawEqual) {
			t.Fatalf("%q -> %q: the other members changed", data, out)
		}
	})
}

func rawEqual(a, b json.RawMessage) bool { return bytes.Equal(a, b) }
