package affinity_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"

	"github.com/agentserve/sessionaffinity/affinity"
)

// The Scheduler inside a net/http/httputil.ReverseProxy: Rewrite picks the backend of
// the request's session, ModifyResponse reports it to the client. Two stand-in backends
// answer with their own name.
func ExampleScheduler_SelectBackend_reverseProxy() {
	var backends []affinity.Backend
	for _, id := range []string{"vllm-a", "vllm-b"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "answered by %s", id)
		}))
		defer srv.Close()
		backends = append(backends, affinity.MustBackend(id, srv.URL, 1))
	}
	sched, err := affinity.New(affinity.Config{})
	if err != nil {
		panic(err)
	}

	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// Errors (e.g. no session ID) are handled before proxying in a real gateway;
			// see examples/gateway.
			b, hit, _ := sched.SelectBackend(pr.In.Header.Get("X-Session-ID"), "", backends)
			u, _ := url.Parse(b.Addr())
			pr.SetURL(u)
			pr.Out.Header.Set("X-Affinity-Hit", strconv.FormatBool(hit)) // passed on to ModifyResponse
		},
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Set("X-Affinity-Hit", resp.Request.Header.Get("X-Affinity-Hit"))
			return nil
		},
	}
	gateway := httptest.NewServer(proxy)
	defer gateway.Close()

	for _, session := range []string{"alice", "alice", "bob", "alice"} {
		req, _ := http.NewRequest(http.MethodPost, gateway.URL+"/v1/chat/completions", nil)
		req.Header.Set("X-Session-ID", session)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%s: %s (hit %s)\n", session, body, resp.Header.Get("X-Affinity-Hit"))
	}
	// Output:
	// alice: answered by vllm-b (hit false)
	// alice: answered by vllm-b (hit true)
	// bob: answered by vllm-a (hit false)
	// alice: answered by vllm-b (hit true)
}
