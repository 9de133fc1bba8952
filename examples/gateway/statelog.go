package gateway

import (
	"context"
	"log/slog"

	"github.com/agentserve/sessionaffinity/health"
)

// logStateChange logs a "backend state change" of backend id from one effective state
// to another (backend, from, to, why). The level follows the
// state reached, as Envoy and HAProxy log a server going down above one coming back:
// Warn for Down (the backend takes no new requests because it failed), Info for Healthy
// or Draining (a recovery, or the operator's drain). An outlier ejection and its end are
// logged by outlier.go (Warn; Info back up, Warn when the active check holds it down). Safe for concurrent use (slog's).
func (g *Gateway) logStateChange(id string, from, to health.State, why string) {
	level := slog.LevelInfo
	if to == health.Down {
		level = slog.LevelWarn
	}
	g.log.Log(context.Background(), level, "backend state change",
		"backend", id, "from", from.String(), "to", to.String(), "why", why)
}
