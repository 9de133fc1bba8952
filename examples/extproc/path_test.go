package extproc_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A :path with a dot segment (an encoded slash counting as a slash), an encoded or raw backslash is
// refused on the request headers with a 400 invalid_path, as the HTTP gateway refuses
// it: nothing is decided or held. A :path that does not parse as a URI is checked as
// sent too (it used to be read as "/").
func TestInvalidPath(t *testing.T) {
	for _, tt := range []struct{ name, path string }{
		{"dot dot", "/v1/../../admin/chat/completions"},
		{"encoded dot dot", "/v1/%2E%2e/admin/chat/completions"},
		{"dot dot between encoded slashes", "/v1/models%2f..%2f..%2fadmin"},
		{"encoded backslash", "/v1%5cchat/completions"},
		{"raw backslash", `/v1\..\admin`},
		{"unparsable with dot dot", "/v1/../admin/%zz"},
		{"unparsable with encoded slash", "/v1%2Fadmin/%zz"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, "")
			st, _ := e.open(t)
			send(t, st, reqHeaders("POST", tt.path+"?q=1", false, duplex, "x-session-id", "s1"))
			ans := recv(t, st)
			status, code, _ := immediateOf(t, ans)
			assert.Equal(t, 400, status)
			assert.Equal(t, "invalid_path", code)
			assert.Contains(t, string(ans.GetImmediateResponse().GetBody()), `"message":"invalid path: the path has `)
			assertNothingHeld(t, e)
			assert.Zero(t, e.g.Scheduler().Len(), "nothing bound")
		})
	}
}
