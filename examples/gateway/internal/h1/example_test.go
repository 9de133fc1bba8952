package h1_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/agentserve/sessionaffinity/examples/gateway/internal/h1"
)

// A Server serves an http.Handler on a listener until Shutdown.
func ExampleServer() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	s := &h1.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello "+r.URL.Path)
	})}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()

	tr := &http.Transport{}
	resp, err := (&http.Client{Transport: tr}).Get("http://" + ln.Addr().String() + "/there")
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	tr.CloseIdleConnections()
	fmt.Println(resp.StatusCode, resp.ContentLength, string(body))

	fmt.Println(s.Shutdown(context.Background()), <-served)
	// Output:
	// 200 12 hello /there
	// <nil> http: Server closed
}
