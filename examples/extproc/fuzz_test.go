package extproc

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// Any request body, split anywhere, gets exactly one outcome: an ImmediateResponse that
// ends the exchange, or a pick (headers answer with the destination, then the body).
func FuzzRequestBody(f *testing.F) {
	for _, s := range []string{`{"model":"m"}`, `{"model":`, `[]`, `null`, ``, `{"model":7}`, "\xff", `{"cache_salt":1}`} {
		f.Add([]byte(s), uint8(3))
	}
	cfg, err := gateway.ParseConfig([]byte("backends:\n  - {id: b0, url: \"http://10.0.0.1:8000\"}\n  - {id: b1, url: \"http://10.0.0.2:8000\"}\nmax_body_bytes: 4096\n"))
	if err != nil {
		f.Fatal(err)
	}
	g, err := gateway.New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	defer g.Close()
	s, err := New(g)
	if err != nil {
		f.Fatal(err)
	}
	hv := func(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, RawValue: []byte(v)} }
	f.Fuzz(func(t *testing.T, body []byte, split uint8) {
		x := &exchange{s: s, reqDuplex: true, respDuplex: true}
		defer x.release()
		out, done, err := x.handle(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
				hv(":method", "POST"), hv(":path", "/v1/chat/completions"), hv("content-type", "application/json"), hv("x-session-id", "s")}}}}})
		if err != nil || done || len(out) != 0 {
			t.Fatalf("headers: out %v done %v err %v", out, done, err)
		}
		cut := int(split) % (len(body) + 1)
		for i, chunk := range [][]byte{body[:cut], body[cut:]} {
			out, done, err = x.handle(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
				RequestBody: &extprocv3.HttpBody{Body: chunk, EndOfStream: i == 1}}})
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 && (done || len(out) != 0) {
				t.Fatalf("answered before the end of the body: %v", out)
			}
		}
		switch {
		case done:
			if len(out) != 1 || out[0].GetImmediateResponse() == nil {
				t.Fatalf("done without one immediate response: %v", out)
			}
			if x.leased {
				t.Fatal("rejected request counted in flight")
			}
		default:
			if len(out) < 1 || out[0].GetRequestHeaders() == nil {
				t.Fatalf("no headers answer: %v", out)
			}
			ep := out[0].GetDynamicMetadata().GetFields()[MetadataNamespace].GetStructValue().GetFields()[MetadataKeyDestination].GetStringValue()
			if ep != "10.0.0.1:8000" && ep != "10.0.0.2:8000" {
				t.Fatalf("endpoint %q", ep)
			}
		}
	})
}
