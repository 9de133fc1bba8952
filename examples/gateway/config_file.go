package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// MaxConfigBytes is the largest configuration file [LoadConfig], [Gateway.ReloadFile] and
// [Gateway.WatchConfig] read: 16 MiB, thousands of times a config with hundreds of
// backends. A larger file is refused with [ErrConfigTooLarge] after reading at most
// MaxConfigBytes+1 bytes, so a path pointing at an endless source costs no more memory
// than that.
const MaxConfigBytes = 16 << 20

// Errors of reading the configuration file (not configuration errors: they do not wrap
// [ErrInvalidConfig]). A reload refused by one logs "config reload rejected" and the
// previous configuration keeps serving.
var (
	// ErrConfigNotRegular: the config path, symlinks followed, is not a regular file: a
	// directory, a device (/dev/zero), a named pipe (FIFO) or a socket. It is refused
	// before it is read, so a FIFO nobody writes to cannot block a reload, nor an endless
	// device fill memory.
	ErrConfigNotRegular = errors.New("gateway: config path is not a regular file")
	// ErrConfigTooLarge: the config file holds more than [MaxConfigBytes] (16 MiB).
	ErrConfigTooLarge = errors.New("gateway: config file larger than 16 MiB (gateway.MaxConfigBytes)")
)

// readConfigFile returns the content of the configuration file at path and the
// os.FileInfo of the file it read (os.File.Stat: its identity, size and times, for
// [Gateway.WatchConfig]). A path that is not a regular file once symlinks are followed
// is refused with [ErrConfigNotRegular] before it is opened, and again after the open
// (the path may have changed in between; the open does not wait for a FIFO's writer),
// so it is never read; a file over [MaxConfigBytes] is refused with [ErrConfigTooLarge]
// after at most MaxConfigBytes+1 bytes. Other errors wrap the os error.
func readConfigFile(path string) ([]byte, fs.FileInfo, error) {
	if fi, err := os.Stat(path); err != nil {
		return nil, nil, fmt.Errorf("gateway: read config: %w", err)
	} else if !fi.Mode().IsRegular() {
		return nil, nil, notRegularConfig(path, fi.Mode())
	}
	f, err := os.OpenFile(path, os.O_RDONLY|openNoBlock, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("gateway: read config: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("gateway: read config: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, notRegularConfig(path, fi.Mode())
	}
	if fi.Size() > MaxConfigBytes {
		return nil, nil, tooLargeConfig(path, fi.Size())
	}
	var buf bytes.Buffer
	buf.Grow(int(fi.Size()) + bytes.MinRead) // the size seen, at most MaxConfigBytes: one read, no regrowth
	if _, err := buf.ReadFrom(io.LimitReader(f, MaxConfigBytes+1)); err != nil {
		return nil, nil, fmt.Errorf("gateway: read config: %w", err)
	}
	if buf.Len() > MaxConfigBytes { // grew since the Stat
		return nil, nil, tooLargeConfig(path, int64(buf.Len()))
	}
	return buf.Bytes(), fi, nil
}

func notRegularConfig(path string, mode fs.FileMode) error {
	return fmt.Errorf("%w: %s: is %s; want a YAML file", ErrConfigNotRegular, path, fileKind(mode))
}

func tooLargeConfig(path string, size int64) error {
	return fmt.Errorf("%w: %s: %d bytes or more, over the %d-byte cap", ErrConfigTooLarge, path, size, MaxConfigBytes)
}

// fileKind names the type of a file that is not a regular one for an error message ("a
// device, not a regular file"), instead of its mode string (fs.FileMode.String gives
// "Dc---------" for /dev/null).
func fileKind(mode fs.FileMode) string {
	switch t := mode.Type(); {
	case t&fs.ModeDir != 0:
		return "a directory, not a regular file"
	case t&fs.ModeDevice != 0: // character devices carry ModeCharDevice too
		return "a device, not a regular file"
	case t&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO), not a regular file"
	case t&fs.ModeSocket != 0:
		return "a socket, not a regular file"
	case t&fs.ModeSymlink != 0:
		return "a symbolic link, not a regular file"
	default:
		return "not a regular file"
	}
}
