package gateway_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// echoUpgradeServer answers an "Upgrade: echo" request with 101 Switching Protocols and
// then echoes every byte over the hijacked connection until the gateway closes it.
func echoUpgradeServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "upgrade required", http.StatusUpgradeRequired)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		_, _ = io.Copy(c, brw.Reader)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// An Upgrade request is tunnelled: the client gets the backend's 101 and exchanges bytes
// both ways over the same connection; the tunnel holds its lease until it closes, counts
// as a success for outlier detection, and has no stream-idle bound.
func TestUpgradeTunnel(t *testing.T) {
	for _, client := range []string{gateway.BackendClientDirect, gateway.BackendClientNetHTTP} {
		t.Run(client, func(t *testing.T) {
			eachServer(t, func(t *testing.T, server string) {
				backend := echoUpgradeServer(t)
				g, err := gateway.New(gateway.Config{
					Backends:      []gateway.BackendConfig{{ID: "a", URL: backend.URL}, {ID: "b", URL: backend.URL}},
					Health:        gateway.HealthConfig{Enabled: new(false)},
					BackendClient: client,
					// A tunnel idles longer than this in the test: it is not bounded by it.
					Timeouts: gateway.TimeoutsConfig{StreamIdleSeconds: 0.05},
					// One counted failure would eject the backend.
					OutlierDetection: gateway.OutlierConfig{ConsecutiveConnectFailures: 1},
				})
				require.NoError(t, err)
				t.Cleanup(g.Close)
				front := newFront(t, server, g, nil)
				t.Cleanup(front.Close)

				conn, err := net.Dial("tcp", front.Listener.Addr().String())
				require.NoError(t, err)
				defer conn.Close()
				_, err = io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: gw\r\nUpgrade: echo\r\nConnection: Upgrade\r\nX-Session-ID: s1\r\n\r\n")
				require.NoError(t, err)
				br := bufio.NewReader(conn)
				resp, err := http.ReadResponse(br, nil)
				require.NoError(t, err)
				require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
				assert.Equal(t, "echo", resp.Header.Get("Upgrade"))
				id := resp.Header.Get(gateway.HeaderBackend)
				require.Contains(t, []string{"a", "b"}, id)

				echo := func(msg string) {
					t.Helper()
					_, err := io.WriteString(conn, msg)
					require.NoError(t, err)
					got := make([]byte, len(msg))
					_, err = io.ReadFull(br, got)
					require.NoError(t, err)
					assert.Equal(t, msg, string(got))
				}
				echo("ping")
				assert.Equal(t, int64(1), g.Scheduler().Load(id).Requests, "the tunnel holds its lease")
				// Idle for several stream_idle_seconds: a tunnel may idle (no bound on it).
				<-time.After(200 * time.Millisecond)
				echo("a longer message, after the idle spell")
				assert.Empty(t, g.PassivelyDown())

				require.NoError(t, conn.Close())
				require.Eventually(t, func() bool { return g.Scheduler().Load(id).Requests == 0 },
					5*time.Second, 5*time.Millisecond, "the lease ends when the tunnel closes")
				reqs, bytes := g.InFlight()
				assert.Zero(t, reqs+bytes)
				front.Close()
				require.Eventually(t, func() bool { return requestsByClass(t, g)["1xx/backend"] == 1 },
					5*time.Second, 5*time.Millisecond, "counted as 1xx: %v", requestsByClass(t, g))
			})
		})
	}
}

// Bytes a client sends in the same write as its Upgrade request (before the 101) reach
// the backend through the tunnel: the server has read them with the request, and the
// ReverseProxy copies from the hijacked connection only (tester40).
func TestUpgradeTunnelEarlyBytes(t *testing.T) {
	eachServer(t, func(t *testing.T, server string) {
		backend := echoUpgradeServer(t)
		srv := serveGatewayOn(t, server, gateway.BackendClientDirect, backend.URL)
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		require.NoError(t, err)
		defer conn.Close()
		require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
		_, err = io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: gw\r\nUpgrade: echo\r\nConnection: Upgrade\r\n"+
			"X-Session-ID: s1\r\n\r\nEARLY")
		require.NoError(t, err)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
		_, err = io.WriteString(conn, "+late")
		require.NoError(t, err)
		got := make([]byte, len("EARLY+late"))
		_, err = io.ReadFull(br, got)
		require.NoError(t, err, "echoed so far: %q", got)
		assert.Equal(t, "EARLY+late", string(got))
	})
}

// servedTunnel is a gateway served by Serve over an echo-upgrade backend "a", with one
// upgrade tunnel open through it.
type servedTunnel struct {
	g      *gateway.Gateway
	addr   string        // the listener's
	conn   net.Conn      // the client's end of the tunnel (10 s deadline)
	br     *bufio.Reader // on conn, past the 101
	cancel func()        // starts Serve's shutdown drain
	served <-chan error  // Serve's result
}

// serveTunnel serves a gateway (server, drain_seconds drain) with Serve and opens one
// tunnel through it. Everything ends with the test.
func serveTunnel(t *testing.T, server string, drain float64) *servedTunnel {
	t.Helper()
	backend := echoUpgradeServer(t)
	g, err := gateway.New(gateway.Config{
		Server:       server,
		Backends:     []gateway.BackendConfig{{ID: "a", URL: backend.URL}},
		Health:       gateway.HealthConfig{Enabled: new(false)},
		DrainSeconds: drain,
	})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	served := make(chan error, 1)
	go func() { served <- g.Serve(ctx, ln) }()

	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: gw\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	return &servedTunnel{g: g, addr: ln.Addr().String(), conn: conn, br: br, cancel: cancel, served: served}
}

// Serve closes the upgrade tunnels still open when its drain is over (Shutdown does not
// track hijacked connections).
func TestServeClosesTunnels(t *testing.T) {
	eachServer(t, func(t *testing.T, server string) {
		st := serveTunnel(t, server, 0.05)
		st.cancel()
		require.NoError(t, <-st.served)
		_, err := io.ReadAll(st.br) // ends: the gateway closed the tunnel
		require.NoError(t, err)
		require.Eventually(t, func() bool { return st.g.Scheduler().Load("a").Requests == 0 },
			5*time.Second, 5*time.Millisecond, "the lease ends with the tunnel")
	})
}

// A tunnel still open when the drain begins gets the rest of drain_seconds, like any
// request in flight (Shutdown alone does not wait for hijacked connections), and the
// drain ends as soon as it closes (tester40: a tunnel alone was cut at once).
func TestServeDrainWaitsForTunnels(t *testing.T) {
	eachServer(t, func(t *testing.T, server string) {
		st := serveTunnel(t, server, 30)
		st.cancel()
		require.Eventually(t, func() bool { // the drain has begun: no new connections
			c, err := net.Dial("tcp", st.addr)
			if err == nil {
				_ = c.Close()
			}
			return err != nil
		}, 5*time.Second, 5*time.Millisecond)
		_, err := io.WriteString(st.conn, "still there")
		require.NoError(t, err)
		got := make([]byte, len("still there"))
		_, err = io.ReadFull(st.br, got)
		require.NoError(t, err, "the tunnel was closed when the drain began")
		require.Equal(t, "still there", string(got))
		select {
		case err := <-st.served:
			t.Fatalf("Serve returned (%v) with a tunnel still open in its drain", err)
		default:
		}

		require.NoError(t, st.conn.Close())
		select {
		case err := <-st.served:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("the drain did not end when its last tunnel closed")
		}
	})
}
