package gateway

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// appendMetadata writes the same bytes as json.Marshal(Metadata{...}).
func TestAppendMetadataMatchesEncodingJSON(t *testing.T) {
	for _, id := range []string{"b1", "", `q"uote`, `back\slash`, "tab\there", "<html>&", "ünï", "bad\xffutf8", "nl\n"} {
		for _, hit := range []bool{true, false} {
			want, err := json.Marshal(Metadata{Backend: id, AffinityHit: hit, Tier: id + "-tier"})
			require.NoError(t, err)
			require.Equal(t, string(want), string(appendMetadata(nil, id, hit, id+"-tier")), "id %q", id)
		}
	}
}

// FuzzMember: the scan finds a top-level key exactly when encoding/json does, with the
// same value.
func FuzzMember(f *testing.F) {
	for _, s := range []string{`{}`, `{"model":"m"}`, `{"a":{"model":1},"model":[1,"]"]}`, ` {"mo\u0064el" : null } `,
		`{"x":"\"model\":","model":true}`, `[1]`, `{"a":1e5,"b":-0.5,"model":"x\"y"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		open, ok := jsonObject(data)
		var m map[string]json.RawMessage
		err := json.Unmarshal(data, &m)
		if !ok {
			if err == nil && m != nil {
				t.Fatalf("jsonObject rejected an object: %q", data)
			}
			return
		}
		require.NoError(t, err)
		for _, key := range []string{"model", MetadataKey, "a"} {
			got, found := member(data, open, key)
			want, wfound := m[key]
			require.Equal(t, wfound, found, "key %q in %q", key, data)
			if found {
				// encoding/json keeps the last duplicate; the scan the first. Compare when unique.
				var a, b any
				require.NoError(t, json.Unmarshal(got, &a), "value %q", got)
				require.NoError(t, json.Unmarshal(want, &b))
				if countKey(data, open, key) == 1 {
					require.Equal(t, b, a)
				}
			}
		}
	})
}

func countKey(obj []byte, open int, key string) int {
	n := 0
	i := skipWS(obj, open+1)
	for i < len(obj) && obj[i] == '"' {
		end := skipString(obj, i)
		if keyIs(obj[i+1:end-1], key) {
			n++
		}
		i = skipWS(obj, skipValue(obj, skipWS(obj, skipWS(obj, end)+1)))
		if i < len(obj) && obj[i] == ',' {
			i = skipWS(obj, i+1)
		}
	}
	return n
}
