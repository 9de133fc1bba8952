package extproc_test

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/stretchr/testify/assert"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/agentserve/sessionaffinity/examples/extproc"
)

// Response headers on a stream with no decision get no header mutation (not an empty
// X-Agent-Serve-Backend).
func TestResponseHeadersWithoutDecision(t *testing.T) {
	e := newEnv(t, "")
	st, _ := e.open(t)
	send(t, st, respHeaders(false))
	r := recv(t, st).GetResponseHeaders()
	assert.NotNil(t, r, "the response headers are answered")
	assert.Nil(t, r.GetResponse().GetHeaderMutation(), "nothing is set")
	closeAndDrain(t, st)
}

// A subset hint that is not a list of strings is a 400 naming the hint, not an empty
// subset (503).
func TestMalformedSubsetHint(t *testing.T) {
	tests := []struct {
		name string
		v    *structpb.Value
		want string
	}{
		{"a string instead of a list", structpb.NewStringValue("10.0.0.10:8000"), "got a string"},
		{"a number", structpb.NewNumberValue(1), "got a number"},
		{"a list with a number", structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{
			structpb.NewStringValue("10.0.0.10:8000"), structpb.NewNumberValue(1)}}), "got a number at index 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, "")
			st, _ := e.open(t)
			r := reqHeaders("POST", chatPath, false, duplex, "x-session-id", "s1")
			r.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
				extproc.SubsetNamespace: {Fields: map[string]*structpb.Value{extproc.SubsetKey: tt.v}}}}
			send(t, st, r) // refused on the headers: the stream ends before any body
			ans := recv(t, st)
			status, code, _ := immediateOf(t, ans)
			assert.Equal(t, 400, status)
			assert.Equal(t, "invalid_subset_hint", code)
			body := string(ans.GetImmediateResponse().GetBody())
			assert.Contains(t, body, extproc.SubsetKey)
			assert.Contains(t, body, tt.want)
			assertNothingHeld(t, e)
		})
	}
}
