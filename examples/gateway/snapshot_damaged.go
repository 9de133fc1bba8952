package gateway

import (
	"errors"
	"os"

	"github.com/agentserve/sessionaffinity/affinity"
)

// DamagedSnapshotSuffix is appended to binding_snapshot's path to keep aside a snapshot
// that [Gateway.Serve] could not load because it is damaged (see [Gateway.Serve]).
const DamagedSnapshotSuffix = ".damaged"

// loadAtStart loads the binding snapshot at path for [Gateway.Serve] and logs the
// outcome. A damaged file (affinity.ErrCorruptSnapshot, or affinity.ErrSnapshotVersion:
// not a snapshot this build reads) is renamed to path+DamagedSnapshotSuffix, replacing
// an older one, so that the snapshot saved at shutdown does not destroy the evidence.
// Whatever the error, the gateway starts with an empty table rather than not at all.
func (g *Gateway) loadAtStart(path string) {
	n, err := g.LoadBindings(path)
	switch {
	case err == nil:
		if n >= 0 {
			g.log.Info("binding snapshot loaded", "path", path, "bindings", n)
		}
	case errors.Is(err, affinity.ErrCorruptSnapshot), errors.Is(err, affinity.ErrSnapshotVersion):
		kept := path + DamagedSnapshotSuffix
		if rerr := os.Rename(path, kept); rerr != nil {
			g.log.Error("binding snapshot not loaded; starting with an empty table; the damaged file could not be kept aside and will be replaced at shutdown",
				"path", path, "err", err, "rename_err", rerr)
			return
		}
		g.log.Error("binding snapshot not loaded; starting with an empty table; the damaged file is kept",
			"path", path, "kept_as", kept, "err", err)
	default:
		g.log.Error("binding snapshot not loaded; starting with an empty table", "path", path, "err", err)
	}
}
