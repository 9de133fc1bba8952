package gateway

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/agentserve/sessionaffinity/affinity"
)

// DamagedSnapshotSuffix is appended to binding_snapshot's path to keep aside a snapshot
// that [Gateway.Serve] could not load because it is damaged or cannot be read (see
// [Gateway.Serve]).
const DamagedSnapshotSuffix = ".damaged"

// loadAtStart loads the binding snapshot at path for [Gateway.Serve] and logs the
// outcome: "loading binding snapshot" (path, size) before, "binding snapshot loaded"
// (bindings stored, records, dropped as expired, as too long for max_session_id_bytes
// and over max_bindings, duration) after, at Warn when live bindings were dropped (too
// long or over the cap), else at Info.
//
//   - Loaded: the file is consumed (removed), so a crash before the shutdown save
//     starts empty instead of restoring bindings that moved since; the shutdown writes a
//     fresh one.
//   - Empty (0 bytes): no snapshot, as for a missing file; logged at Info, left in place
//     (the shutdown save replaces it).
//   - Damaged (affinity.ErrCorruptSnapshot, too large included, or
//     affinity.ErrSnapshotVersion: not a snapshot this build reads) or unreadable
//     (permission denied, an I/O error): renamed to path+DamagedSnapshotSuffix, replacing
//     an older one, so the snapshot saved at shutdown does not destroy it.
//
// Whatever the error, the gateway starts with an empty table rather than not at all. It
// returns non-nil when path holds a file that could neither be read nor kept aside:
// Serve must then not save over it.
func (g *Gateway) loadAtStart(path string) (keep error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // a first start
	}
	if err == nil && fi.Mode().IsRegular() && fi.Size() == 0 {
		// Decision: an empty file is no snapshot (a path created ahead, by touch or
		// tmpfiles.d), as the config check accepts it; nothing to load or keep aside. The
		// shutdown save replaces it.
		g.log.Info("binding snapshot file is empty: no bindings to load; starting with an empty table", "path", path)
		return nil
	}
	if err == nil {
		g.log.Info("loading binding snapshot", "path", path, "bytes", fi.Size())
	}
	start := time.Now()
	st, err := g.loadBindings(path)
	switch {
	case err == nil && st.Stored < 0: // removed between the Stat and the Open
		return nil
	case err == nil:
		removed := true
		if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			removed = false
			g.log.Warn("binding snapshot loaded but not removed: a crash before the shutdown save would restore these bindings again, even those that move in the meantime",
				"path", path, "err", rerr)
		}
		// The rest of the records did not fit under max_bindings (evicted, oldest first, while
		// restoring; the table was empty). Those and the too long ones were live bindings
		// when saved: losing them is a WARN, expiring is not.
		overCap := max(0, st.Records-st.Stored-st.Expired-st.TooLong)
		level := slog.LevelInfo
		if overCap > 0 || st.TooLong > 0 {
			level = slog.LevelWarn
		}
		g.log.Log(context.Background(), level, "binding snapshot loaded", "path", path, "bindings", st.Stored, "records", st.Records,
			"dropped_expired", st.Expired, "dropped_too_long", st.TooLong, "dropped_over_cap", overCap,
			"duration", time.Since(start), "file_removed", removed)
		return nil
	case errors.Is(err, affinity.ErrCorruptSnapshot), errors.Is(err, affinity.ErrSnapshotVersion):
		kept := path + DamagedSnapshotSuffix
		if rerr := os.Rename(path, kept); rerr != nil {
			g.log.Error("binding snapshot not loaded; starting with an empty table; the damaged file could not be kept aside and will be replaced at shutdown",
				"path", path, "err", err, "rename_err", rerr)
			return nil
		}
		g.log.Error("binding snapshot not loaded; starting with an empty table; the damaged file is kept",
			"path", path, "kept_as", kept, "err", err)
		return nil
	default: // cannot be read: keep it as a damaged one, or do not save over it
		kept := path + DamagedSnapshotSuffix
		if rerr := os.Rename(path, kept); rerr != nil {
			g.log.Error("binding snapshot not loaded; starting with an empty table; the unreadable file could not be kept aside, so no snapshot will be saved at shutdown",
				"path", path, "err", err, "rename_err", rerr)
			return fmt.Errorf("%s could not be read at start (%w) nor kept aside (%w)", path, err, rerr)
		}
		g.log.Error("binding snapshot not loaded; starting with an empty table; the unreadable file is kept",
			"path", path, "kept_as", kept, "err", err)
		return nil
	}
}
