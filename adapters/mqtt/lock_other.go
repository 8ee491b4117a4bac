//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package mqtt

import (
	"errors"
	"sync"
)

var errLocked = errors.New("held by another subscription")

// locks are the claims of this process where flock(2) is missing: two
// processes of one host with one instance name must set instance= apart.
var locks = struct {
	sync.Mutex
	held map[string]bool
}{held: map[string]bool{}}

func lockFile(path string) (release func(), err error) {
	locks.Lock()
	defer locks.Unlock()
	if locks.held[path] {
		return nil, errLocked
	}
	locks.held[path] = true
	return func() { locks.Lock(); delete(locks.held, path); locks.Unlock() }, nil
}
