// Command epp-probe sends an endpoint picker the ext_proc message sequence Envoy sends
// for one request (request headers, body, response headers, response body with end of
// stream, in FULL_DUPLEX_STREAMED mode) and prints the picked endpoint, so a running
// affinity-epp can be tried without Envoy:
//
//	go run -C examples/extproc ./cmd/affinity-epp &
//	go run -C examples/extproc ./cmd/epp-probe -session s1 -turns 3
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9002", "endpoint picker address")
	session := flag.String("session", "probe-session", "X-Session-ID value")
	body := flag.String("body", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "request body")
	turns := flag.Int("turns", 1, "requests to send")
	flag.Parse()
	if err := run(os.Stdout, *addr, *session, *body, *turns); err != nil {
		fmt.Fprintln(os.Stderr, "epp-probe:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, addr, session, body string, turns int) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := extprocv3.NewExternalProcessorClient(conn)
	for turn := 1; turn <= turns; turn++ {
		if err := probe(w, client, turn, session, body); err != nil {
			return err
		}
	}
	return nil
}

func probe(w io.Writer, client extprocv3.ExternalProcessorClient, turn int, session, body string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := client.Process(ctx)
	if err != nil {
		return err
	}
	hv := func(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, RawValue: []byte(v)} }
	msgs := []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{hv(":method", "POST"), hv(":path", "/v1/chat/completions"),
				hv("content-type", "application/json"), hv("x-session-id", session)}}}},
			ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
				ResponseBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true}}},
	}
	for _, m := range msgs {
		if err := st.Send(m); err != nil {
			return err
		}
	}
	first, err := st.Recv()
	if err != nil {
		return err
	}
	if ir := first.GetImmediateResponse(); ir != nil {
		fmt.Fprintf(w, "turn %d: immediate response %d: %s\n", turn, ir.GetStatus().GetCode(), ir.GetBody())
		return nil
	}
	endpoint := first.GetDynamicMetadata().GetFields()["envoy.lb"].GetStructValue().GetFields()["x-gateway-destination-endpoint"].GetStringValue()
	if _, err := st.Recv(); err != nil { // the streamed request body
		return err
	}
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{hv(":status", "200")}}}}}); err != nil {
		return err
	}
	rh, err := st.Recv()
	if err != nil {
		return err
	}
	hit := ""
	for _, h := range rh.GetResponseHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == "x-agent-serve-affinity-hit" {
			hit = string(h.GetHeader().GetRawValue())
		}
	}
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(`{"ok":true}`), EndOfStream: true}}}); err != nil {
		return err
	}
	if _, err := st.Recv(); err != nil {
		return err
	}
	fmt.Fprintf(w, "turn %d: x-gateway-destination-endpoint=%s affinity_hit=%s\n", turn, endpoint, hit)
	return st.CloseSend()
}
