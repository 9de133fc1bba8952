//go:build !linux

package gateway

import "io/fs"

// changeTime reports no status-change time on this platform: WatchConfig compares the
// modification time, size and file identity only.
func changeTime(fs.FileInfo) (int64, bool) { return 0, false }
