package e2e_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// startSlowUpload opens a raw connection to the gateway and sends the headers of a chat
// request announcing a body of size bytes plus the first part of it, then waits until the
// gateway is reading that body (its first chunk is charged to max_inflight_bytes). The
// caller may send the rest on the returned connection; it is closed at cleanup.
func startSlowUpload(t *testing.T, c *cluster, session string, size int, part string) net.Conn {
	t.Helper()
	_, before := c.gw.InFlight()
	conn, err := net.Dial("tcp", strings.TrimPrefix(c.url, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() }) // the gateway's read fails, the handler returns
	_, err = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"+
		"X-Session-ID: %s\r\nContent-Length: %d\r\n\r\n%s", session, size, part)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, bytes := c.gw.InFlight()
		return bytes > before
	}, 5*time.Second, time.Millisecond, "the gateway is reading the body of %s", session)
	return conn
}

// Uploads still arriving do not count toward limits.max_inflight_requests: more slow
// clients than the limit, each having announced 8 MiB and sent 10 bytes, leave the
// request slots free for a normal client. (Before, a request was counted on arrival:
// the fifth slow client got 503 and so did every other client until read_body_seconds
// cut them.)
func TestSlowUploadsDoNotHoldRequestSlots(t *testing.T) {
	const (
		limit = 4
		slow  = 2 * limit
		size  = 8 << 20
	)
	c := newCluster(t, 1, func(cfg *gateway.Config) {
		cfg.MaxBodyBytes = size
		cfg.Limits.MaxInflightRequests = limit
		cfg.Health.Enabled = new(false)
	})
	for i := range slow {
		startSlowUpload(t, c, fmt.Sprintf("slow-%d", i), size, `{"model":"`)
	}
	reqs, bytes := c.gw.InFlight()
	t.Logf("%d slow uploads: %d requests counted, %d KiB reserved", slow, reqs, bytes>>10)
	assert.Zero(t, reqs, "uploads still arriving hold no request slot")

	r := c.chat("normal", []msg{{Role: "user", Content: "hello"}})
	assert.Equal(t, http.StatusOK, r.status, "a normal client is served: %s", r.body)
}

// limits.max_inflight_requests still bounds the requests being proxied: with the limit
// held by requests waiting on their backend, another chat, a GET (no body: counted on
// arrival) and an upload whose body completes all get the JSON 503 with Retry-After; an
// upload still arriving is not refused for it. Every slot is returned once.
func TestInflightLimitCountsRequestsOnceBodyIsRead(t *testing.T) {
	const limit = 2
	c, entered, unblock := heldCluster(t, limit)

	var wg sync.WaitGroup
	t.Cleanup(func() { unblock(); wg.Wait() }) // before the cluster's: a failed check must not hang Close
	held := make([]int, limit)
	for i := range limit {
		wg.Go(func() { held[i] = c.chat(fmt.Sprintf("held-%d", i), []msg{{Role: "user", Content: "x"}}).status })
	}
	for range limit {
		<-entered
	}
	reqs, bytes := c.gw.InFlight()
	require.EqualValues(t, limit, reqs)
	// /metrics is served outside the limit and shows the same figures.
	mf := c.metrics()
	assert.EqualValues(t, limit, gauge(mf, gateway.MetricInflightRequests, nil), "the in-flight gauge while the limit is full")
	assert.EqualValues(t, bytes, gauge(mf, gateway.MetricInflightBytes, nil), "the reserved bytes (the held requests' bodies)")
	assert.Positive(t, bytes)

	overloaded := func(what string, status int, header http.Header, body []byte) {
		t.Helper()
		assert.Equal(t, http.StatusServiceUnavailable, status, "%s: %s", what, body)
		assert.Equal(t, "3", header.Get("Retry-After"), what)
		code, msg := errorCode(t, body)
		assert.Equal(t, "overloaded", code, what)
		assert.Contains(t, msg, "limits.max_inflight_requests", what)
	}
	r := c.chat("third", []msg{{Role: "user", Content: "x"}})
	overloaded("a chat over the limit", r.status, r.header, r.body)

	resp, err := c.client.Get(c.url + "/v1/models")
	require.NoError(t, err)
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	overloaded("a GET over the limit", resp.StatusCode, resp.Header, data)

	// An upload is read while the limit is full, and refused once its body is in.
	body := `{"model":"fake-model","messages":[{"role":"user","content":"late"}]}`
	conn := startSlowUpload(t, c, "upload", len(body), body[:10])
	_, err = io.WriteString(conn, body[10:])
	require.NoError(t, err)
	resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	data, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	overloaded("an upload completed over the limit", resp.StatusCode, resp.Header, data)

	unblock()
	wg.Wait()
	assert.Equal(t, []int{http.StatusOK, http.StatusOK}, held)
	assert.Eventually(t, func() bool {
		reqs, bytes := c.gw.InFlight()
		return reqs == 0 && bytes == 0
	}, 5*time.Second, time.Millisecond, "every request slot and byte returned exactly once")
	reqs, bytes = c.gw.InFlight()
	assert.Zero(t, reqs)
	assert.Zero(t, bytes)
	mf = c.metrics()
	assert.Zero(t, gauge(mf, gateway.MetricInflightRequests, nil), "the in-flight gauge back to 0")
	assert.Zero(t, gauge(mf, gateway.MetricInflightBytes, nil))
}

// heldCluster starts a gateway with limits.max_inflight_requests = limit (Retry-After 3,
// active health checks off) in front of one backend that holds every chat completion
// until unblock is called (also at cleanup, before the gateway closes); entered gets a
// value for each chat that reached the backend. Other paths are answered at once.
func heldCluster(t *testing.T, limit int64) (c *cluster, entered <-chan struct{}, unblock func()) {
	release := make(chan struct{})
	in := make(chan struct{}, limit+2)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			return // /health, /v1/models
		}
		in <- struct{}{}
		<-release
	}))
	t.Cleanup(slow.Close)
	c = &cluster{t: t, backends: map[string]*backendServer{}, recheck: make(chan time.Time)}
	c.start(gateway.Config{
		Backends: []gateway.BackendConfig{{ID: "slow", URL: slow.URL}},
		Health:   gateway.HealthConfig{Enabled: new(false)},
		Limits:   gateway.LimitsConfig{MaxInflightRequests: limit, RetryAfterSeconds: 3},
	})
	unblock = sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock)
	return c, in, unblock
}

// With tenant.cache_salt the salted copy of a request body is charged to
// limits.max_inflight_bytes beside the body. With a budget of 2 x max_body_bytes + 64 (the
// least the configuration accepts) and max_body_bytes of it held by an upload still
// arriving, a 600 KiB salted request, whose body fits but whose copy does not, gets the
// JSON 503 overloaded and reaches no backend, with an API key or without one (the
// anonymous tenant is salted too); the same body to an endpoint without a salt is
// forwarded; once the upload is gone the salted request is served too.
func TestCacheSaltCopyChargedToBudget(t *testing.T) {
	const maxBody = 1 << 20
	c := newCluster(t, 1, func(cfg *gateway.Config) {
		cfg.MaxBodyBytes = maxBody
		cfg.Limits.MaxInflightBytes = 2*maxBody + 64
		cfg.Tenant = gateway.TenantConfig{APIKey: true, CacheSalt: true}
		cfg.Health.Enabled = new(false)
	})
	hold := startSlowUpload(t, c, "hold", maxBody, strings.Repeat("x", maxBody-1))
	require.Eventually(t, func() bool {
		_, bytes := c.gw.InFlight()
		return bytes >= maxBody
	}, 5*time.Second, time.Millisecond, "the upload's buffer has grown to its announced length")

	body := `{"model":"fake-model","messages":[{"role":"user","content":"` + strings.Repeat("y", 600<<10) + `"}]}`
	post := func(path, apiKey string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, c.url+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Session-ID", "salted")
		if apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+apiKey)
		}
		resp, err := c.client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, data
	}
	const chat = "/v1/chat/completions"
	for _, key := range []string{"key-1", ""} { // a tenant, and the anonymous tenant
		status, data := post(chat, key)
		require.Equal(t, http.StatusServiceUnavailable, status, "%s", data)
		code, msg := errorCode(t, data)
		assert.Equal(t, "overloaded", code)
		assert.Contains(t, msg, "limits.max_inflight_bytes")
	}
	// The same body to an endpoint that takes no salt fits: the simulator's 404, not the
	// gateway's 503.
	status, data := post("/v1/embeddings", "key-1")
	require.Equal(t, http.StatusNotFound, status, "not salted: the body alone fits: %s", data)
	code, _ := errorCode(t, data)
	assert.Equal(t, "not_found", code)

	require.NoError(t, hold.Close())
	require.Eventually(t, func() bool {
		reqs, bytes := c.gw.InFlight()
		return reqs == 0 && bytes == 0
	}, 5*time.Second, time.Millisecond, "the upload's charge is released when its client leaves")
	status, data = post(chat, "key-1")
	assert.Equal(t, http.StatusOK, status, "%s", data)
}
