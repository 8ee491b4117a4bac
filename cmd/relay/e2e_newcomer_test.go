package main

import (
	"strings"
	"testing"
)

// TestMemRefusedOutsideBench: mem:// lives inside one process, so the
// commands that are one process of several refuse it with exit 2 and point
// to relay bench, which publishes and consumes in one process and works.
func TestMemRefusedOutsideBench(t *testing.T) {
	redis := "redis://127.0.0.1:6379/0"
	for _, args := range [][]string{
		{"publish", "mem://x", "orders", "--data", "hello"},
		{"consume", "mem://x", "orders", "--group", "g", "--count", "1", "--timeout", "3s"},
		{"replay", "mem://x", "orders.poison", "--group", "g"},
		{"replay", redis, "orders.poison", "--group", "g", "--to", "MEM://x"},
	} {
		code, stdout, stderr := runRelay(t, nil, args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, "is in-process only") ||
			!strings.Contains(stderr, `"relay bench mem://x TOPIC"`) {
			t.Errorf("relay %v: exit %d, want 2\nstdout %q\nstderr %s", args, code, stdout, stderr)
		}
	}
	code, stdout, stderr := runRelay(t, nil, "bench", "mem://x", "orders", "-n", "200", "-size", "10")
	if code != 0 || !strings.Contains(stdout, "consume:     200 in ") {
		t.Errorf("relay bench mem://x: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
}
