//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fakeBroker is a LocalBroker whose "broker" is a file: up while it
// exists, stopped by removing it and started by creating it.
func fakeBroker(t *testing.T) (b *LocalBroker, state string) {
	state = filepath.Join(t.TempDir(), "up")
	if err := os.WriteFile(state, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	up := func() bool { _, err := os.Stat(state); return err == nil }
	return &LocalBroker{
		Name:           "Fake",
		Lock:           "testenv-" + time.Now().Format("150405.000000000"),
		URLEnv:         "RELAY_TEST_FAKE_URL",
		DefaultURL:     "fake://local",
		Tool:           "sh",
		StartEnv:       "RELAY_TEST_FAKE_START",
		DefaultStart:   "touch '" + state + "'",
		StopEnv:        "RELAY_TEST_FAKE_STOP",
		DefaultStop:    "rm '" + state + "'",
		Up:             up,
		StartPolls:     10,
		StartPollEvery: time.Millisecond,
		UpWhat:         "exist",
	}, state
}

// fatalRecorder records the first Fatalf and ends the goroutine as
// t.Fatalf does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestLocalBrokerCanRestart(t *testing.T) {
	t.Setenv("CI", "")
	t.Setenv("RELAY_REQUIRE_BROKERS", "")
	b, _ := fakeBroker(t)
	if why := b.CanRestart(t); why != "" {
		t.Errorf("local default broker with its tool installed: %q, want it restartable", why)
	}

	t.Setenv("RELAY_TEST_FAKE_URL", "fake://elsewhere")
	want := "RELAY_TEST_FAKE_URL names another broker; set RELAY_TEST_FAKE_STOP and RELAY_TEST_FAKE_START to restart it"
	if why := b.CanRestart(t); why != want {
		t.Errorf("another broker: %q, want %q", why, want)
	}
	t.Setenv("RELAY_TEST_FAKE_START", "true")
	if why := b.CanRestart(t); why != want {
		t.Errorf("another broker with a start command only: %q, want %q", why, want)
	}
	t.Setenv("RELAY_TEST_FAKE_STOP", "true")
	if why := b.CanRestart(t); why != "" {
		t.Errorf("another broker with stop and start commands: %q, want it restartable", why)
	}
	t.Setenv("RELAY_TEST_FAKE_STOP", "")
	b.StopEnv, b.StopFunc = "", func(testing.TB) {}
	if why := b.CanRestart(t); why != "" {
		t.Errorf("another broker with a stop func and a start command: %q, want it restartable", why)
	}
	t.Setenv("RELAY_TEST_FAKE_START", "")
	want = "RELAY_TEST_FAKE_URL names another broker; set RELAY_TEST_FAKE_START to restart it"
	if why := b.CanRestart(t); why != want {
		t.Errorf("another broker with a stop func: %q, want %q", why, want)
	}

	t.Setenv("RELAY_TEST_FAKE_URL", "")
	b.Tool = "relay-no-such-tool"
	if why := b.CanRestart(t); why != "relay-no-such-tool is not installed here" {
		t.Errorf("tool missing: %q", why)
	}
	t.Setenv("CI", "true")
	rec := &fatalRecorder{TB: t}
	done := make(chan string, 1)
	go func() {
		defer func() { done <- rec.msg }()
		why := b.CanRestart(rec)
		rec.msg = "returned " + why
	}()
	if msg := <-done; msg != "relay-no-such-tool is not installed, but CI must run the restart tests against the local Fake" {
		t.Errorf("tool missing under CI: %q, want the test failed", msg)
	}
}

func TestLocalBrokerStopStart(t *testing.T) {
	b, state := fakeBroker(t)
	path := LockFile(b.Lock)
	t.Cleanup(func() { _ = os.Remove(path) })
	up := func() bool { _, err := os.Stat(state); return err == nil }

	t.Run("left down", func(t *testing.T) {
		b.Stop(t)
		if up() {
			t.Error("broker up after Stop")
		}
		if tryExclusive(t, path) {
			t.Error("restart lock free while the broker is down")
		}
	})
	if !up() {
		t.Error("broker left down: cleanup did not start it")
	}
	if !tryExclusive(t, path) {
		t.Error("restart lock not released when the test ended")
	}

	t.Run("restart", func(t *testing.T) {
		b.Restart(t)
		if !up() {
			t.Error("broker down after Restart")
		}
		if tryExclusive(t, path) {
			t.Error("restart lock free before the restarting test ended")
		}
	})
	if !tryExclusive(t, path) {
		t.Error("restart lock not released when the test ended")
	}

	stopped := 0
	b.StopFunc = func(testing.TB) { stopped++; _ = os.Remove(state) }
	t.Run("stop func", func(t *testing.T) {
		b.Stop(t)
		if stopped != 1 || up() {
			t.Errorf("StopFunc called %d times, broker up %v; want once, down", stopped, up())
		}
	})
	if !up() {
		t.Error("broker left down after StopFunc: cleanup did not start it")
	}
}

// Start reports a start command that fails, and a broker that does not
// come up, naming the command.
func TestLocalBrokerStartFailures(t *testing.T) {
	b, state := fakeBroker(t)
	for _, tc := range []struct{ start, want string }{
		{"exit 3", "starting Fake (exit 3): exit status 3"},
		{"true", `Fake does not exist after "true"`},
	} {
		_ = os.Remove(state)
		t.Setenv("RELAY_TEST_FAKE_START", tc.start)
		rec := &errorRecorder{TB: t}
		b.Start(rec)
		if len(rec.errs) != 1 || !strings.HasPrefix(rec.errs[0], tc.want) {
			t.Errorf("start command %q: errors %q, want one starting with %q", tc.start, rec.errs, tc.want)
		}
	}
}

type errorRecorder struct {
	testing.TB
	errs []string
}

func (e *errorRecorder) Helper() {}

func (e *errorRecorder) Errorf(format string, args ...any) {
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}
