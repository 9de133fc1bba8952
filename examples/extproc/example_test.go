package extproc_test

import (
	"context"
	"fmt"
	"net"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agentserve/sessionaffinity/examples/extproc"
	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// Serve the picker on a gRPC server and send it what Envoy sends for a request without
// a body: the answer names the session's endpoint in the header and the metadata. A GET
// is not a generation call, so it binds nothing: both turns get the session's HRW
// choice (a POST to /v1/chat/completions would be placed by Acquire and bind the
// session, as in the gateway).
func Example() {
	cfg, err := gateway.ParseConfig([]byte(`
backends:
  - {id: vllm-0, url: "http://10.0.0.10:8000"}
  - {id: vllm-1, url: "http://10.0.0.11:8000"}
`))
	if err != nil {
		panic(err)
	}
	g, err := gateway.New(cfg)
	if err != nil {
		panic(err)
	}
	defer g.Close()
	srv, err := extproc.New(g)
	if err != nil {
		panic(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	gs := grpc.NewServer()
	srv.Register(gs)
	go gs.Serve(lis)
	defer gs.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	for turn := 1; turn <= 2; turn++ {
		stream, err := extprocv3.NewExternalProcessorClient(conn).Process(context.Background())
		if err != nil {
			panic(err)
		}
		err = stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: &extprocv3.HttpHeaders{EndOfStream: true, Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
				{Key: ":method", RawValue: []byte("GET")}, {Key: ":path", RawValue: []byte("/v1/models")},
				{Key: "x-session-id", RawValue: []byte("session-42")},
			}}}}})
		if err != nil {
			panic(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			panic(err)
		}
		h := resp.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders()[0].GetHeader()
		md := resp.GetDynamicMetadata().GetFields()["envoy.lb"].GetStructValue().GetFields()
		fmt.Printf("turn %d: %s: %s, metadata %s\n", turn, h.GetKey(), h.GetRawValue(), md["x-gateway-destination-endpoint"].GetStringValue())
		_ = stream.CloseSend()
	}
	// Output:
	// turn 1: x-gateway-destination-endpoint: 10.0.0.10:8000, metadata 10.0.0.10:8000
	// turn 2: x-gateway-destination-endpoint: 10.0.0.10:8000, metadata 10.0.0.10:8000
}
