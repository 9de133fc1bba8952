//go:build unix

package gateway

import (
	"errors"
	"os"
	"syscall"
)

// tryLock takes an exclusive flock(2) of f without waiting: false when another open file
// description holds one.
func tryLock(f *os.File) (bool, error) {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}
