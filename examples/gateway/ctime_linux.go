//go:build linux

package gateway

import (
	"io/fs"
	"syscall"
)

// changeTime returns fi's status-change time (ctime, in nanoseconds since the epoch) and
// true when the platform reports it (here: Linux, syscall.Stat_t.Ctim). Every write,
// rename onto, chmod or utimes of the file sets it, and no system call can set it back,
// so it tells a rewritten file whose size and modification time were kept.
func changeTime(fi fs.FileInfo) (int64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Ctim.Nano(), true
}
