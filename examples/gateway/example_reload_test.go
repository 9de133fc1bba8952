package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// Scale out without a restart: the new backend takes new sessions, the live ones stay.
func ExampleGateway_Reload() {
	var urls []string
	for range 2 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{}`))
		}))
		defer srv.Close()
		urls = append(urls, srv.URL)
	}
	one := fmt.Sprintf("backends:\n  - {id: a, url: %q}\n", urls[0])
	cfg, _ := gateway.ParseConfig([]byte(one))
	g, _ := gateway.New(cfg)
	defer g.Close()
	route := func(session string) string {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{}`))
		req.Header.Set("X-Session-ID", session)
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, req)
		return rec.Header().Get(gateway.HeaderBackend) + " hit=" + rec.Header().Get(gateway.HeaderAffinityHit)
	}
	fmt.Println("before:", route("session-1"))

	two, _ := gateway.ParseConfig([]byte(one + fmt.Sprintf("  - {id: b, url: %q, weight: 1000}\n", urls[1])))
	fmt.Println("reload:", g.Reload(two))
	fmt.Println("live session:", route("session-1"))
	fmt.Println("new session:", route("session-2"))

	bad := two
	bad.Backends = nil
	fmt.Println("bad config rejected:", g.Reload(bad) != nil, "backends still", len(g.Config().Backends))
	// Output:
	// before: a hit=false
	// reload: <nil>
	// live session: a hit=true
	// new session: b hit=false
	// bad config rejected: true backends still 2
}
