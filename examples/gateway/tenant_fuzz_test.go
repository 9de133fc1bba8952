package gateway

import (
	"bytes"
	"encoding/json"
	"testing"
)

// withCacheSalt on any JSON object sets exactly the salt and keeps every other member.
func FuzzWithCacheSalt(f *testing.F) {
	for _, s := range []string{`{}`, `{"model":"m"}`, `{"cache_salt":1,"a":[1,{"b":null}]}`,
		`{"x":"\u00e9","cache_salt":"a","cache_salt":"b"}`, ` {"n":1.5e300} `, `[]`, `{"a":`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var in map[string]json.RawMessage
		if json.Unmarshal(body, &in) != nil || in == nil {
			return // withCacheSalt only sees JSON objects (parseModel checked them)
		}
		out, err := withCacheSalt(body, "salt-1")
		if err != nil {
			t.Fatalf("withCacheSalt(%q): %v", body, err)
		}
		var got map[string]json.RawMessage
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("output is not JSON: %q: %v", out, err)
		}
		if string(got[CacheSaltField]) != `"salt-1"` {
			t.Fatalf("cache_salt = %s", got[CacheSaltField])
		}
		delete(in, CacheSaltField)
		delete(got, CacheSaltField)
		if len(in) != len(got) {
			t.Fatalf("members: got %d, want %d", len(got), len(in))
		}
		for k, v := range in {
			var a, b bytes.Buffer
			_ = json.Compact(&a, v)
			_ = json.Compact(&b, got[k])
			if a.String() != b.String() {
				t.Fatalf("member %q: got %s, want %s", k, b.String(), a.String())
			}
		}
	})
}
