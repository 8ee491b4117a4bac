package relaytest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// LagOf returns s as a relay.LagReporter, failing the test if s does not
// implement it.
func LagOf(t testing.TB, s relay.Subscriber) relay.LagReporter {
	t.Helper()
	lr, ok := s.(relay.LagReporter)
	if !ok {
		t.Fatalf("%T does not implement relay.LagReporter", s)
	}
	return lr
}

// WaitLag calls lr.Lag(topic) until it returns want and fails the test,
// naming the last value or error seen, if that does not happen within
// WaitLimit. Brokers settle asynchronously (batched acks, commits,
// deletes, approximate queue counts), so a test waits for the expected
// lag instead of asserting the answer of one call. An error wrapping
// relay.ErrNotSupported fails the test at once.
func WaitLag(t testing.TB, lr relay.LagReporter, topic string, want int64) {
	t.Helper()
	deadline := time.Now().Add(WaitLimit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		got, err := lr.Lag(ctx, topic)
		cancel()
		if err == nil && got == want {
			return
		}
		if errors.Is(err, relay.ErrNotSupported) {
			t.Fatalf("Lag(%s): %v", topic, err)
		}
		if time.Now().After(deadline) {
			if err != nil {
				t.Fatalf("Lag(%s): %v, want %d", topic, err, want)
			}
			t.Fatalf("Lag(%s) = %d after %v, want %d", topic, got, WaitLimit, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
