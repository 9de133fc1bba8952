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
// decode/re-encode rewrite (compared after json.Unmarshal, which maps invalid UTF-8 to
// U+FFFD in both); when the body has no top-level cache_salt, the output is the body
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
		var in map[string]any
		if json.Unmarshal(body, &in) != nil || in == nil {
			if _, err := withCacheSalt(body, salt, nil); err == nil {
				t.Fatalf("withCacheSalt(%q): no error for a body that is not a JSON object", body)
			}
			return
		}
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
		var got, want map[string]any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("withCacheSalt(%q) = %q: %v", body, out, err)
		}
		if err := json.Unmarshal(ref, &want); err != nil {
			t.Fatalf("decodeCacheSalt(%q) = %q: %v", body, ref, err)
		}
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
