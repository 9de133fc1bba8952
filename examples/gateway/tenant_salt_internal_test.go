package gateway

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// withCacheSalt cuts every top-level cache_salt out and inserts the salt first; every
// other byte of the body stays as sent.
func TestWithCacheSaltSplice(t *testing.T) {
	const salt = "S"
	for _, tc := range []struct{ name, in, want string }{
		{"empty object", `{}`, `{"cache_salt":"S"}`},
		{"empty object with whitespace", " { \n} ", ` {"cache_salt":"S" ` + "\n} "},
		{"no cache_salt", `{"model":"m","n":1}`, `{"cache_salt":"S","model":"m","n":1}`},
		{"only cache_salt", `{"cache_salt":"client"}`, `{"cache_salt":"S"}`},
		{"only cache_salt, duplicated", `{"cache_salt":1,"cache_salt":{"a":[]}}`, `{"cache_salt":"S"}`},
		{"cache_salt first", `{"cache_salt":"c","model":"m"}`, `{"cache_salt":"S","model":"m"}`},
		{"cache_salt last", `{"model":"m","cache_salt":"c"}`, `{"cache_salt":"S","model":"m"}`},
		{"cache_salt in the middle", `{"a":1,"cache_salt":"c","b":2}`, `{"cache_salt":"S","a":1,"b":2}`},
		{"duplicates everywhere", `{"cache_salt":0,"a":1,"cache_salt":2,"cache_salt":3,"b":4,"cache_salt":5,"cache_salt":6}`,
			`{"cache_salt":"S","a":1,"b":4}`},
		{"escaped key", `{"m":1,"cache\u005fsalt":"c","\u0063ache_salt":"d"}`, `{"cache_salt":"S","m":1}`},
		{"nested cache_salt untouched", `{"a":{"cache_salt":"x"},"b":[{"cache_salt":1}]}`,
			`{"cache_salt":"S","a":{"cache_salt":"x"},"b":[{"cache_salt":1}]}`},
		{"whitespace everywhere", " \t{ \"a\" : 1 ,\n \"cache_salt\"\r: \"c\" , \"b\":2 } \n",
			" \t{\"cache_salt\":\"S\", \"a\" : 1 ,\n \"b\":2 } \n"},
		{"whitespace, cache_salt last", "{ \"a\" : 1 , \"cache_salt\" : 2 }", "{\"cache_salt\":\"S\", \"a\" : 1 }"},
		{"lone surrogate key kept", `{"model":"a","\ud800model":"b"}`, `{"cache_salt":"S","model":"a","\ud800model":"b"}`},
		{"invalid UTF-8 key kept", "{\"k\xff\xfe\":\"v\xc3\",\"cache_salt\":1}", "{\"cache_salt\":\"S\",\"k\xff\xfe\":\"v\xc3\"}"},
		{"unicode and numbers kept", `{"é":1.50E+3,"x":"\u00e9</>&"}`, `{"cache_salt":"S","é":1.50E+3,"x":"\u00e9</>&"}`},
		{"similar keys kept", `{"cache_salt ":1,"cache_sal":2,"Cache_salt":3}`, `{"cache_salt":"S","cache_salt ":1,"cache_sal":2,"Cache_salt":3}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := withCacheSalt([]byte(tc.in), salt, nil)
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(got))
			assert.True(t, json.Valid(got), "%q", got)
			assert.Equal(t, len(got), cap(got), "one allocation of exactly the output length")
		})
	}
}

// The salt is written as a JSON string, escaped where needed.
func TestWithCacheSaltEscapesSalt(t *testing.T) {
	got, err := withCacheSalt([]byte(`{"a":1}`), "q\"\\\n", nil)
	require.NoError(t, err)
	var v map[string]any
	require.NoError(t, json.Unmarshal(got, &v), "%q", got)
	assert.Equal(t, "q\"\\\n", v[CacheSaltField])
}

// A body that is not a valid JSON object is an error, never a partial rewrite.
func TestWithCacheSaltRejects(t *testing.T) {
	for _, in := range []string{``, `[]`, `"x"`, `{"a":`, `{"a":1} x`, `{"a":1}{}`, "--boundary\r\n"} {
		_, err := withCacheSalt([]byte(in), "S", nil)
		assert.Error(t, err, "%q", in)
	}
}

// The output is charged before it is allocated, by its exact length; a refusal is
// errOverBudget.
func TestWithCacheSaltCharges(t *testing.T) {
	body := []byte(`{"model":"m","cache_salt":"old"}`)
	var charged int64
	got, err := withCacheSalt(body, "0123456789abcdefghijkl", func(n int64) bool { charged += n; return true })
	require.NoError(t, err)
	assert.Equal(t, int64(len(got)), charged)
	assert.Equal(t, `{"cache_salt":"0123456789abcdefghijkl","model":"m"}`, string(got))

	_, err = withCacheSalt(body, "S", func(int64) bool { return false })
	assert.True(t, errors.Is(err, errOverBudget), "%v", err)
}
