//go:build !unix

package gateway

// openNoBlock is 0 where the platform has no FIFO that an open would wait on.
const openNoBlock = 0
