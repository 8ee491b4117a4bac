//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package mqtt

import (
	"errors"
	"os"
	"syscall"
)

var errLocked = errors.New("held by another subscription")

// lockFile takes an exclusive flock on path (created when missing) without
// waiting: errLocked when another open of it holds one, in this process or
// another. The release removes the file and then unlocks it; a locker
// that opened the file before the removal finds, once it has the lock,
// that the path no longer names its file, and tries again.
func lockFile(path string) (release func(), err error) {
	for {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			_ = f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, errLocked
			}
			return nil, err
		}
		held, err1 := f.Stat()
		named, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, named) {
			return func() { _ = os.Remove(path); _ = f.Close() }, nil
		}
		_ = f.Close() // removed by its last holder meanwhile
	}
}
