package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// limits.max_header_bytes is net/http's Server.MaxHeaderBytes, which reads 4,096 bytes
// over it before answering 431 (its buffer slack): docs/gateway.md and LimitsConfig say so.
// The header blocks below are about max_header_bytes + 3,000 (served) and + 5,000 (431).
func TestMaxHeaderBytesSlack(t *testing.T) {
	eachServer(t, func(t *testing.T, server string) {
		const limit = 2048
		g, _ := testGateway(t, "health: {enabled: false}\nlimits: {max_header_bytes: 2048}\n")
		srv := newFront(t, server, g, g.HTTPServer())
		defer srv.Close()
		client := srv.Client()
		for _, tt := range []struct {
			over int
			want int
		}{
			{3000, http.StatusOK},
			{5000, http.StatusRequestHeaderFieldsTooLarge},
		} {
			req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/models", nil)
			require.NoError(t, err)
			req.Header.Set("X-Filler", strings.Repeat("a", limit+tt.over))
			resp, err := client.Do(req)
			require.NoError(t, err)
			_ = resp.Body.Close()
			assert.Equal(t, tt.want, resp.StatusCode, "max_header_bytes %d + %d", limit, tt.over)
		}
	})
}
