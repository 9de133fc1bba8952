package gateway_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// informationalServer is a backend that answers every request with an unsolicited
// 100 Continue, a 103 Early Hints and then a JSON 200, and closes the connection.
func informationalServer(t *testing.T) string {
	t.Helper()
	return requestServer(t, func(c net.Conn, _ *http.Request) {
		_, _ = io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n"+
			"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"+
			"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\nConnection: close\r\n\r\n{\"ok\":true}")
	})
}

// Informational responses from the backend: its 100 Continue is never forwarded (the
// gateway answers a client's Expect itself: one 100, its own, when it reads the body),
// a 103 Early Hints reaches HTTP/1.1 clients, and an HTTP/1.0 client gets no 1xx at all
// (RFC 9110 §15.2). Raw sockets on the client side, both backend clients. (Before: a
// client sending Expect: 100-continue got two 100s, one without it got the backend's
// unsolicited 100, and an HTTP/1.0 client got both 1xx.)
func TestBackendInformationalResponses(t *testing.T) {
	tests := []struct {
		name     string
		proto    string
		expect   bool // send Expect: 100-continue and wait for the 100 before the body
		want100  int
		want103  int
		wantLink bool // the 103's Link header is in the output (only with the 103)
	}{
		{"HTTP/1.1 with Expect", "HTTP/1.1", true, 1, 1, true},
		{"HTTP/1.1", "HTTP/1.1", false, 0, 1, true},
		{"HTTP/1.0", "HTTP/1.0", false, 0, 0, false},
	}
	for _, client := range []string{gateway.BackendClientDirect, gateway.BackendClientNetHTTP} {
		for _, tt := range tests {
			t.Run(client+"/"+tt.name, func(t *testing.T) {
				eachServer(t, func(t *testing.T, server string) {
					c := dialGatewayOn(t, server, client, informationalServer(t))
					head := "POST /v1/chat/completions " + tt.proto + "\r\nHost: gw\r\nX-Session-ID: s1\r\n" +
						"Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(chatBody)) + "\r\nConnection: close\r\n"
					if tt.expect {
						head += "Expect: 100-continue\r\n"
					}
					_, err := io.WriteString(c, head+"\r\n")
					require.NoError(t, err)
					br := bufio.NewReader(c)
					var all string
					if tt.expect {
						first, err := br.ReadString('\n')
						require.NoError(t, err)
						require.Equal(t, "HTTP/1.1 100 Continue\r\n", first, "the gateway asks for the body")
						all = first
					}
					_, err = io.WriteString(c, chatBody)
					require.NoError(t, err)
					rest, err := io.ReadAll(br)
					require.NoError(t, err)
					all += string(rest)

					assert.Equal(t, tt.want100, strings.Count(all, " 100 Continue\r\n"), "response:\n%s", all)
					assert.Equal(t, tt.want103, strings.Count(all, " 103 Early Hints\r\n"), "response:\n%s", all)
					assert.Equal(t, tt.wantLink, strings.Contains(all, "Link: </style.css>"), "response:\n%s", all)
					assert.Contains(t, all, " 200 OK\r\n")
					assert.Contains(t, all, `"ok":true`)
				})
			})
		}
	}
}
