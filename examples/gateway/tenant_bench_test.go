package gateway

import (
	"strings"
	"testing"
)

// BenchmarkWithCacheSalt measures the cache_salt rewrite of a 1 MiB chat request (one
// long message plus a client cache_salt to replace): bytes allocated per request (B/op)
// is the memory tenant.cache_salt adds to a request body already held. splice is the
// rewrite the gateway uses; decode is the decode/re-encode rewrite it replaced
// (decodeCacheSalt), kept as the baseline.
func BenchmarkWithCacheSalt(b *testing.B) {
	body := []byte(`{"model":"m","cache_salt":"client","messages":[{"role":"user","content":"` +
		strings.Repeat("x", 1<<20) + `"}],"stream":false}`)
	const salt = "0123456789abcdefghijkl"
	for _, bc := range []struct {
		name    string
		rewrite func([]byte, string) ([]byte, error)
	}{
		{"splice", func(b []byte, s string) ([]byte, error) { return withCacheSalt(b, s, nil) }},
		{"decode", decodeCacheSalt},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.rewrite(body, salt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
