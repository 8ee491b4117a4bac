//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package testenv

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"
)

// tryExclusive reports whether path can be locked exclusively right now.
func tryExclusive(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return true
}

func TestRestartLock(t *testing.T) {
	broker := "testenv-" + time.Now().Format("150405.000000000")
	path := LockFile(broker)
	t.Cleanup(func() { _ = os.Remove(path) })

	t.Run("hold", func(t *testing.T) {
		HoldBroker(t, broker)
		HoldBroker(t, broker) // shared holders do not exclude each other
		if tryExclusive(t, path) {
			t.Error("restart lock free while the broker is held")
		}
	})
	if !tryExclusive(t, path) {
		t.Fatal("HoldBroker not released when its test ended")
	}

	unlock := LockForRestart(t, broker)
	if tryExclusive(t, path) {
		t.Error("restart lock free during a restart")
	}
	unlock()
	if !tryExclusive(t, path) {
		t.Error("restart lock not released by unlock")
	}
}
