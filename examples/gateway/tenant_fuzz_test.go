package gateway

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// decodeCacheSalt is the cache_salt rewrite before the byte splice (decode into a map,
// set the salt, re-encode): the reference FuzzWithCacheSalt compares withCacheSalt to.
func decodeCacheSalt(body []byte, salt string) ([]byte, error) {
	var obj map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	v, _ := json.Marshal(salt)
	obj[CacheSaltField] = v
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// withCacheSalt on any JSON object gives valid JSON with the same members as the
// decode/re-encode rewrite (compared after decoding, which maps invalid UTF-8 to U+FFFD
// in both); anything else is an error; when the body has no top-level cache_salt, the output is the body
// with exactly the salt member inserted after its '{', every other byte unchanged.
func FuzzWithCacheSalt(f *testing.F) {
	for _, s := range []string{`{}`, `{"model":"m"}`, `{"cache_salt":1,"a":[1,{"b":null}]}`,
		`{"x":"\u00e9","cache_salt":"a","cache_salt":"b"}`, ` {"n":1.5e300} `, `[]`, `{"a":`,
		`{"model":"a","\ud800model":"b"}`, "{\"k\xff\":1, \"cache\\u005fsalt\" : 2 }",
		`{"a":{"cache_salt":1},"cache_salt":[],"b":2,"cache_salt":{}}`} {
		f.Add([]byte(s))
	}
	const salt = "salt-1"
	f.Fuzz(func(t *testing.T, body []byte) {
		if trimmed := bytes.TrimLeft(body, " \t\r\n"); !json.Valid(body) || trimmed[0] != '{' {
			if _, err := withCacheSalt(body, salt, nil); err == nil {
				t.Fatalf("withCacheSalt(%q): no error for a body that is not a JSON object", body)
			}
			return
		}
		in := decodeObject(t, body)
		out, err := withCacheSalt(body, salt, nil)
		if err != nil {
			t.Fatalf("withCacheSalt(%q): %v", body, err)
		}
		if !json.Valid(out) {
			t.Fatalf("withCacheSalt(%q) = %q: not valid JSON", body, out)
		}
		ref, err := decodeCacheSalt(body, salt)
		if err != nil {
			t.Fatalf("decodeCacheSalt(%q): %v", body, err)
		}
		got, want := decodeObject(t, out), decodeObject(t, ref)
		if got[CacheSaltField] != salt || !reflect.DeepEqual(got, want) {
			t.Fatalf("withCacheSalt(%q) = %q, decoded %v; the decode/re-encode rewrite gives %v", body, out, got, want)
		}
		if _, had := in[CacheSaltField]; !had {
			open := bytes.IndexByte(body, '{')
			head := `"cache_salt":"salt-1"`
			if len(in) > 0 {
				head += ","
			}
			exact := string(body[:open+1]) + head + string(body[open+1:])
			if string(out) != exact {
				t.Fatalf("withCacheSalt(%q) = %q, want %q (only the salt inserted)", body, out, exact)
			}
		}
	})
}

// decodeObject decodes the JSON object b (numbers as json.Number: 1e700 is valid JSON).
func decodeObject(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decoding %q: %v", b, err)
	}
	return m
}
