package gateway

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"sync"
	"time"
)

// Reload triggers: the trigger field of the "config reloaded", "config unchanged" and
// "config reload rejected" log lines, which says what asked for the reload.
const (
	TriggerAPI    = "api"    // [Gateway.Reload] or [Gateway.ReloadFile], called by the embedding program
	TriggerSIGHUP = "sighup" // a SIGHUP (the command passes it to [Gateway.ReloadFileFor])
	TriggerWatch  = "watch"  // [Gateway.WatchConfig] saw the file change (the command's -watch-config)
)

// ReloadFile is [Gateway.ReloadFileFor] with trigger [TriggerAPI].
func (g *Gateway) ReloadFile(path string, override func(*Config)) error {
	return g.ReloadFileFor(path, TriggerAPI, override)
}

// ReloadFileFor loads the YAML file at path ([LoadConfig]: a path that is not a regular
// file or a file over [MaxConfigBytes] is refused unread), applies override to it (nil:
// none; the command uses it for its -listen flag) and calls [Gateway.Reload]. trigger
// names what asked for it ([TriggerSIGHUP], [TriggerWatch], [TriggerAPI], or any short
// word of the caller's) in the log lines. On success Reload logs "config reloaded" (or
// "config unchanged"); on failure it logs "config reload rejected" with the error at
// level Error and returns the error — the old configuration keeps serving. The file it
// read counts as seen for [Gateway.WatchConfig] on the same path: a SIGHUP after an edit
// loads it once, not once more at the watcher's next tick. Safe for concurrent use.
func (g *Gateway) ReloadFileFor(path, trigger string, override func(*Config)) error {
	g.fileReload.Lock()
	defer g.fileReload.Unlock()
	return g.reloadFile(path, trigger, override)
}

// reloadFile is ReloadFileFor with g.fileReload held.
func (g *Gateway) reloadFile(path, trigger string, override func(*Config)) error {
	cfg, fi, err := loadConfigFile(path)
	if fi != nil {
		g.cfgSeen.set(path, fi)
	}
	if err == nil {
		if override != nil {
			override(&cfg)
		}
		err = g.reload(cfg, trigger) // counts its result
	} else {
		g.reloadMu.Lock()                   // as reload counts
		g.reloadStats.count(reloadRejected) // the file could not be read or parsed
		g.reloadMu.Unlock()
	}
	if err != nil {
		g.log.Error("config reload rejected; the previous config keeps serving", "path", path, "trigger", trigger, "err", err)
	}
	return err
}

// seenConfig is the configuration file the last file reload read: its path and
// os.FileInfo. Safe for concurrent use.
type seenConfig struct {
	mu   sync.Mutex
	path string
	fi   fs.FileInfo // nil: none yet
}

func (s *seenConfig) set(path string, fi fs.FileInfo) {
	s.mu.Lock()
	s.path, s.fi = path, fi
	s.mu.Unlock()
}

// is reports whether fi, an os.Stat of path, is the file the last file reload read,
// unchanged since.
func (s *seenConfig) is(path string, fi fs.FileInfo) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fi != nil && s.path == path && sameConfigFile(fi, s.fi)
}

// WatchConfig polls the file at path on every tick (the caller owns the ticker, e.g.
// time.NewTicker(2*time.Second).C) and calls [Gateway.ReloadFile] when it changed since
// the last look (the first look only records it): another modification time, another
// size, another file (os.SameFile: device and inode), or, on Linux, another
// status-change time (ctime, which no tool can set back), so a replacement renamed over
// path with the same size and modification time (cp -p, rsync -t, install -p, then mv)
// is loaded too, and on Linux also one that reuses the inode number (rm then cp -p,
// install -p) or a rewrite in place that keeps size and modification time. path is followed through symlinks (os.Stat), so a symlink swapped to
// another target is a change. It returns nil when ctx is done or ticks is closed. No new
// dependency (no inotify): a change is seen within one tick. A change another file reload
// of path already read ([Gateway.ReloadFileFor], e.g. on SIGHUP) is not loaded again. Its
// reloads log trigger [TriggerWatch].
//
// A path that cannot be stat'ed — missing, a dangling symlink, or another error — is
// skipped until it can (the current configuration keeps serving), with one Warn when it
// starts ("watched config file is missing", "... is a dangling symlink", or "... cannot
// be read") and one Info when the file is back; not a line per tick. The file that comes
// back is loaded if it differs from the last one seen. Limits: on other platforms than
// Linux a file rewritten in place or re-created on the same inode number, keeping its
// size and modification time, is not seen; on Linux neither is a second such change
// within one tick of the file system's coarse clock (a few milliseconds) after a look;
// SIGHUP ([Gateway.ReloadFile]) loads it.
func (g *Gateway) WatchConfig(ctx context.Context, path string, ticks <-chan time.Time, override func(*Config)) error {
	var last fs.FileInfo // the last file seen; nil: none yet
	problem := ""        // the Warn logged for the current failure to stat path; "": none
	look := func() fs.FileInfo {
		fi, err := os.Stat(path)
		if err == nil {
			if problem != "" {
				g.log.Info("watched config file is back", "path", path)
				problem = ""
			}
			return fi
		}
		msg := "watched config file cannot be read; the current config keeps serving"
		if errors.Is(err, fs.ErrNotExist) {
			msg = "watched config file is missing; the current config keeps serving"
			if lfi, lerr := os.Lstat(path); lerr == nil && lfi.Mode()&fs.ModeSymlink != 0 {
				msg = "watched config file is a dangling symlink; the current config keeps serving"
			}
		}
		if msg != problem {
			g.log.Warn(msg, "path", path, "err", err)
			problem = msg
		}
		return nil
	}
	last = look()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-ticks:
			if !ok {
				return nil
			}
		}
		fi := look()
		if fi == nil || last != nil && sameConfigFile(fi, last) {
			continue
		}
		last = fi
		// Checked under the file reload's lock: a SIGHUP's reload that began after this
		// look has read the file (and marked it seen) by the time the lock is ours.
		g.fileReload.Lock()
		if !g.cfgSeen.is(path, fi) { // else read by another reload since the last look (a SIGHUP)
			_ = g.reloadFile(path, TriggerWatch, override) // logged
		}
		g.fileReload.Unlock()
	}
}

// sameConfigFile reports whether a and b, two os.Stat results of the watched path, are
// the same file unchanged: same modification time, size and identity (os.SameFile),
// and the same status-change time (ctime) where the platform reports it (changeTime).
func sameConfigFile(a, b fs.FileInfo) bool {
	if !a.ModTime().Equal(b.ModTime()) || a.Size() != b.Size() || !os.SameFile(a, b) {
		return false
	}
	ca, okA := changeTime(a)
	cb, okB := changeTime(b)
	return !okA || !okB || ca == cb
}
