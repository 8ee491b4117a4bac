//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package testenv

// lockFile does nothing where flock(2) is missing: tests that restart a
// broker are then not serialised with other test processes.
func lockFile(string, bool) (unlock func(), err error) { return func() {}, nil }
