package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// Test processes of this module share the local brokers, and "go test
// ./..." runs packages in parallel. A test that stops a broker holds the
// broker's restart lock exclusively (LockForRestart) while it is down; a
// test that needs the broker to stay up holds it shared (HoldBroker). The
// lock is a file in os.TempDir named relay-<broker>-restart.lock (broker
// is "redis" or "amqp"), locked with flock(2) where the system has it;
// elsewhere both functions do nothing. Both are best effort: when the
// file cannot be opened or locked they log why and go on unlocked.

// LockFile returns the path of broker's restart lock file.
func LockFile(broker string) string {
	return filepath.Join(os.TempDir(), "relay-"+broker+"-restart.lock")
}

// HoldBroker takes broker's restart lock shared until t ends (released at
// t.Cleanup), so that restarts by other test processes wait for t. It
// blocks while another process restarts the broker. Do not call
// LockForRestart for the same broker in the same test while holding it:
// the exclusive lock would wait for this shared one forever.
func HoldBroker(t testing.TB, broker string) {
	t.Helper()
	unlock, err := lockFile(LockFile(broker), false)
	if err != nil {
		t.Logf("cannot hold the %s restart lock (restarts are not held off): %v", broker, err)
		return
	}
	t.Cleanup(unlock)
}

// LockForRestart takes broker's restart lock exclusively, waiting until
// no other test process holds it, shared or exclusive. Call unlock once
// the broker is up again, exactly once.
func LockForRestart(t testing.TB, broker string) (unlock func()) {
	t.Helper()
	unlock, err := lockFile(LockFile(broker), true)
	if err != nil {
		t.Logf("cannot take the %s restart lock (other tests are not held off): %v", broker, err)
		return func() {}
	}
	return unlock
}
