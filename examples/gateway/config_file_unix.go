//go:build unix

package gateway

import "syscall"

// openNoBlock makes readConfigFile's open return at once on a FIFO without a writer
// (the file is then refused as not regular, never read).
const openNoBlock = syscall.O_NONBLOCK
