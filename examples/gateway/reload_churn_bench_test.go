package gateway_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/agentserve/sessionaffinity/examples/gateway"
)

// BenchmarkReloadChurn times a reload that replaces 30 % of 3,000 backends (health
// checks off, the Scheduler kept) after 30 such reloads: ~30,000 backend IDs configured
// at some point, as tester37's churn run had after a few minutes. The /metrics subtest
// times a scrape there. Before the life tracked only the backends configured or in
// flight, both walked every ID ever configured, and each reload scanned that list once
// per configured backend (tester37 finding 1).
func BenchmarkReloadChurn(b *testing.B) {
	const backends, churn, warm = 3000, 900, 30
	next := 0
	ids := make([]string, backends)
	for i := range ids {
		ids[i] = fmt.Sprintf("pod-%d", next)
		next++
	}
	cfg := func() gateway.Config {
		c := gateway.Config{Health: gateway.HealthConfig{Enabled: new(false)}}
		for _, id := range ids {
			c.Backends = append(c.Backends, gateway.BackendConfig{ID: id, URL: "http://" + id + ".test"})
		}
		return c
	}
	replace := func(round int) {
		for k := range churn {
			ids[(round*131+k*3)%backends] = fmt.Sprintf("pod-%d", next)
			next++
		}
	}
	g, err := gateway.New(cfg(), gateway.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(g.Close)
	round := 0
	for ; round < warm; round++ {
		replace(round)
		if err := g.Reload(cfg()); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("reload", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			replace(round)
			round++
			c := cfg()
			b.StartTimer()
			if err := g.Reload(c); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(next), "ids-ever")
	})
	b.Run("metrics", func(b *testing.B) {
		for b.Loop() {
			rec := httptest.NewRecorder()
			g.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			if rec.Code != http.StatusOK {
				b.Fatal(rec.Code)
			}
		}
	})
}
