//go:build !unix

package gateway

import "os"

// tryLock locks nothing where flock(2) is not available.
func tryLock(*os.File) (bool, error) { return true, nil }
