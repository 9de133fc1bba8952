package gateway_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// prefixBackend is a backend reached through the URL path /tenant-a: it records the
// escaped path of every request it gets.
type prefixBackend struct {
	mu    sync.Mutex
	paths []string
}

func (p *prefixBackend) seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.paths...)
}

func newPrefixGateway(t *testing.T) (*gateway.Gateway, *prefixBackend) {
	t.Helper()
	pb := &prefixBackend{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pb.mu.Lock()
		pb.paths = append(pb.paths, r.URL.EscapedPath())
		pb.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(srv.Close)
	cfg, err := gateway.ParseConfig([]byte("health: {enabled: false}\nbackends:\n  - {id: b0, url: \"" + srv.URL + "/tenant-a\"}\n"))
	require.NoError(t, err)
	g, err := gateway.New(cfg)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	return g, pb
}

// A request path with a dot segment (raw or percent-encoded, any case), an encoded slash
// or backslash, or a raw backslash is a 400 invalid_path before anything is routed or
// bound: the backend behind the /tenant-a prefix never sees it (tester32: /v1/../../admin
// reached the backend's /admin/). Other paths, and queries, go through unchanged.
func TestInvalidPath(t *testing.T) {
	const refused = ""
	tests := []struct {
		name, method, target string
		want                 string // the path the backend sees; refused: a 400
	}{
		{"dot dot", "POST", "/v1/../../admin/chat/completions", refused},
		{"dot dot, GET without session", "GET", "/v1/../../admin/x", refused},
		{"dot", "POST", "/v1/./chat/completions", refused},
		{"trailing dot dot", "GET", "/v1/models/..", refused},
		{"trailing dot", "GET", "/v1/models/.", refused},
		{"encoded dot dot", "POST", "/v1/%2e%2e/%2e%2e/admin/chat/completions", refused},
		{"encoded dot dot, upper case", "POST", "/v1/%2E%2E/admin/chat/completions", refused},
		{"mixed dot dot", "POST", "/v1/.%2e/admin/chat/completions", refused},
		{"mixed dot dot 2", "POST", "/v1/%2E./admin/chat/completions", refused},
		{"encoded dot", "POST", "/v1/%2e/chat/completions", refused},
		{"leading encoded dot dot", "GET", "/%2e%2e/admin/y", refused},
		{"encoded slash", "POST", "/v1%2f..%2fadmin/chat/completions", refused},
		{"encoded slash and dot dot, upper case", "GET", "/v1/models%2F..%2F..%2Fadmin", refused},
		// tester34: the SDKs' models.retrieve of a Hugging Face-style model ID
		{"encoded slash in a model ID", "GET", "/v1/models/meta-llama%2FLlama-3.1-8B-Instruct", "/tenant-a/v1/models/meta-llama%2FLlama-3.1-8B-Instruct"},
		{"encoded backslash", "GET", "/v1/..%5cadmin", refused},
		{"encoded backslash, upper case", "GET", "/v1/%5Cadmin", refused},
		{"raw backslash", "GET", `/v1\..\admin`, refused},
		// tester33: a byte that makes net/http drop RawPath turned %2F into a separator
		// ("/v1/chat/completions%7C" at the backend); refused as sent, in either form.
		{"encoded slash and a pipe", "POST", "/v1/chat%2Fcompletions|", refused},
		{"encoded slash and a brace", "POST", "/v1/chat%2Fcompletions{", refused},
		{"encoded slash and a caret", "POST", "/v1/chat%2Fcompletions^", refused},
		{"encoded slash and a backtick", "POST", "/v1/chat%2Fcompletions`", refused},
		{"encoded slash and a non-ASCII byte", "POST", "/v1/chat%2Fcompletions\xff", refused},
		{"pipe alone", "GET", "/v1/models|", refused},
		{"non-ASCII byte alone", "GET", "/v1/mod\xffels", refused},
		{"square bracket", "GET", "/v1/models[0]", refused},
		{"number sign", "GET", "/v1/models#x", refused},
		{"absolute-form, encoded slash and a pipe", "POST", "http://gw.example/v1/chat%2Fcompletions|?q=1", refused},
		{"absolute-form, dot dot", "GET", "http://gw.example/v1/../../admin", refused},
		{"asterisk-form, not OPTIONS", "POST", "*", refused},
		// tester34: a "://" in the query was taken for the absolute form's
		{"scheme without authority, :// in the query", "POST", "x:/v1/chat%2Fcompletions|?q=://h", refused},
		{"opaque target, :// in the query", "POST", "x:foo/../../admin?q=://h/v1", refused},
		{"opaque target", "GET", "a:b", refused},
		{"http with one slash", "GET", "http:/v1/models", refused},

		{"plain", "POST", "/v1/chat/completions", "/tenant-a/v1/chat/completions"},
		{"query is not the path", "GET", "/v1/models?p=../../x%2f%5c", "/tenant-a/v1/models"},
		{"three dots", "GET", "/v1/.../x", "/tenant-a/v1/.../x"},
		{"dot prefix", "GET", "/.well-known/x", "/tenant-a/.well-known/x"},
		{"dots inside", "GET", "/v1/a..b/c.", "/tenant-a/v1/a..b/c."},
		{"double encoded dot dot", "GET", "/v1/%252e%252e/x", "/tenant-a/v1/%252e%252e/x"},
		{"other escapes", "GET", "/v1/a%20b%2Dc", "/tenant-a/v1/a%20b%2Dc"},
		{"escaped pipe", "GET", "/v1/a%7Cb", "/tenant-a/v1/a%7Cb"},
		{"sub-delims, colon and at", "GET", "/v1/a!$&'()*+,;=:@b", "/tenant-a/v1/a!$&'()*+,;=:@b"},
		{"query with other bytes", "GET", "/v1/models?x=|{^", "/tenant-a/v1/models"},
		{"absolute-form", "GET", "http://gw.example/v1/models?x=1", "/tenant-a/v1/models"},
		{"absolute-form, no path", "GET", "http://gw.example", "/tenant-a/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, pb := newPrefixGateway(t)
			var body *strings.Reader
			if tt.method == "POST" {
				body = strings.NewReader(chatBody)
			} else {
				body = strings.NewReader("")
			}
			req := httptest.NewRequest(tt.method, tt.target, body)
			if tt.method == "POST" {
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Session-ID", "s1")
			}
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, req)
			if tt.want != refused {
				require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
				assert.Equal(t, []string{tt.want}, pb.seen())
				return
			}
			require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
			var eb struct {
				Error struct{ Message, Type, Code string }
			}
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &eb), rec.Body.String())
			assert.Equal(t, "invalid_path", eb.Error.Code)
			assert.Equal(t, "invalid_request_error", eb.Error.Type)
			assert.True(t, strings.HasPrefix(eb.Error.Message, "invalid path: the path has "), eb.Error.Message)
			assert.Empty(t, rec.Header().Get(gateway.HeaderBackend), "refused before a backend is chosen")
			assert.Empty(t, pb.seen(), "the backend never sees the request")
			assert.Zero(t, g.Scheduler().Len(), "nothing bound")
		})
	}
}

// The message quotes at most 64 bytes of the path (the truncate bound of every error
// that echoes client input).
func TestInvalidPathMessageBound(t *testing.T) {
	g, _ := newPrefixGateway(t)
	long := "/v1/" + strings.Repeat("a", 500) + "/../SECRET-TAIL"
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, httptest.NewRequest("GET", long, nil))
	require.Equal(t, http.StatusBadRequest, rec.Code)
	assert.NotContains(t, rec.Body.String(), "SECRET-TAIL")
	assert.Less(t, rec.Body.Len(), 300, rec.Body.String())
}

// Decide refuses such a path as ServeHTTP does (the ext_proc picker relies on it).
func TestDecideInvalidPath(t *testing.T) {
	g, _ := newPrefixGateway(t)
	r := httptest.NewRequest("POST", "/v1/%2e%2e/admin/chat/completions", nil)
	r.Header.Set("X-Session-ID", "s1")
	_, err := g.Decide(r, []byte(chatBody), nil)
	var re *gateway.RequestError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, http.StatusBadRequest, re.Status)
	assert.Equal(t, "invalid_path", re.Code)
	assert.ErrorIs(t, err, gateway.ErrInvalidPath)
	assert.ErrorIs(t, err, gateway.ErrRequest)
	assert.True(t, strings.HasPrefix(re.ClientMessage(), "invalid path: "), re.ClientMessage())
	assert.Zero(t, g.Scheduler().Len(), "nothing bound")
}

// rfc3986Path is an empty path or one made of "/", RFC 3986's pchar (unreserved,
// sub-delims, ":", "@") and percent-encodings.
var rfc3986Path = regexp.MustCompile(`^(/([A-Za-z0-9._~!$&'()*+,;=:@/-]|%[0-9A-Fa-f]{2})*)?$`)

// checkPathReference is the rule of CheckPath written plainly: empty or starting with
// "/" and made of RFC 3986 path characters and valid percent-encodings only, no %5C in
// any case, and no segment that is "." or ".." once %2E (any case) is read as a dot and
// %2F (any case) as a slash.
func checkPathReference(p string) bool {
	if !rfc3986Path.MatchString(p) {
		return false
	}
	for _, bad := range []string{"%5c", "%5C"} {
		if strings.Contains(p, bad) {
			return false
		}
	}
	for _, seg := range strings.Split(strings.ReplaceAll(strings.ReplaceAll(p, "%2f", "/"), "%2F", "/"), "/") {
		seg = strings.ReplaceAll(strings.ReplaceAll(seg, "%2e", "."), "%2E", ".")
		if seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

func TestCheckPath(t *testing.T) {
	for _, tt := range []struct {
		path string
		ok   bool
	}{
		{"", true}, {"/", true}, {"//", true}, {"/v1/chat/completions", true},
		{".", false}, {"..", false}, {"/.", false}, {"/..", false}, {"./x", false}, {"/a/./b", false},
		{"/%2e", false}, {"/%2E%2e/", false}, {"/%2e%2e%2e", true}, {"/a%2f", true}, {"/a%2f..", false}, {"/..%2Fa", false},
		{"/%2e%2e%2fadmin", false}, {"/a%2F.%2Fb", false}, {"/a%2F...", true}, {"/v1/models/org%2Fmodel-1.5", true},
		{"/v1/models/.%2Fmodels%2Fllama", false}, // a relative model ID (docs/gateway.md, Request paths) {"/a%5C", false}, {`/a\`, false},
		{"/..;/x", true}, {"/a%7c%7Cb", true}, {"/a-b_c.d~e!$&'()*+,;=:@", true}, {"/%00", true},
		// no leading slash (asterisk-form, authority-form, a bare name)
		{"*", false}, {"127.0.0.1:41001", false}, {"v1/models", false},
		// invalid percent-encodings (tester33's brief: "%" not followed by two hex digits)
		{"/.%2", false}, {"/%2", false}, {"/%", false}, {"/%2e%", false}, {"/%%2e", false}, {"/%2%2e", false},
		{"/%zz", false}, {"/%g0", false}, {"/a%2", false},
		// bytes outside RFC 3986's path characters (tester33: net/http drops RawPath on them)
		{"/v1/chat%2Fcompletions|", false}, {"/a|", false}, {"/a{", false}, {"/a}", false}, {"/a^", false},
		{"/a`", false}, {"/a\xff", false}, {"/a\x00", false}, {"/a b", false}, {"/a\"", false}, {"/a<", false},
		{"/a#", false}, {"/a[", false}, {"/a]", false}, {"/a?", false}, {"/a\t", false}, {"/é", false},
	} {
		err := gateway.CheckPath(tt.path)
		assert.Equal(t, tt.ok, err == nil, "%q: %v", tt.path, err)
		assert.Equal(t, tt.ok, checkPathReference(tt.path), "reference on %q", tt.path)
		if err != nil {
			assert.True(t, errors.Is(err, gateway.ErrInvalidPath), "%q: %v", tt.path, err)
		}
	}
}

// CheckPath never panics and agrees with the plain reference of its rule.
func FuzzCheckPath(f *testing.F) {
	for _, s := range []string{"/v1/chat/completions", "/v1/../x", "/%2e%2E/", "/a%2fb", `\`, "/%", "/.%2", "/...", "",
		"/v1/chat%2Fcompletions|", "/a{", "/a^", "/a\xff", "/%zz", "*", "/a%7C"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		err := gateway.CheckPath(p)
		if want := checkPathReference(p); (err == nil) != want {
			t.Fatalf("CheckPath(%q) = %v, reference says ok=%v", p, err, want)
		}
		if err != nil && !errors.Is(err, gateway.ErrInvalidPath) {
			t.Fatalf("CheckPath(%q) = %v: not ErrInvalidPath", p, err)
		}
	})
}
