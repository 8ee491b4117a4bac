// Package relaytest holds the small helpers the adapter test suites share:
// provisioning a topic, publishing, subscribing and waiting for the next
// message, each failing the test with a message that names what went wrong.
//
// It is imported only by _test.go files. Every helper that takes a
// testing.TB calls t.Helper and reports failures with t.Fatalf, so, like
// t.Fatal itself, it must be called from the goroutine running the test.
// Quiet and Unique are safe for concurrent use.
package relaytest

import (
	"context"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// The bounds the helpers wait for. They are limits for a broken run to end
// with a message instead of hanging, not timing assertions: a healthy run
// never comes near them.
const (
	// ProvisionTimeout bounds one Provision call.
	ProvisionTimeout = 30 * time.Second
	// PublishTimeout bounds one Publish call.
	PublishTimeout = 60 * time.Second
	// WaitLimit is how long Next waits for a message.
	WaitLimit = 30 * time.Second
	// OpenTimeout bounds opening a publisher or subscriber.
	OpenTimeout = 20 * time.Second
)

// OpenPublisher opens a publisher for raw within OpenTimeout, failing the
// test otherwise, and closes it when the test ends.
func OpenPublisher(t testing.TB, raw string) relay.Publisher {
	t.Helper()
	return open(t, raw, "OpenPublisher", relay.OpenPublisher)
}

// OpenSubscriber opens a subscriber for raw within OpenTimeout, failing
// the test otherwise, and closes it when the test ends.
func OpenSubscriber(t testing.TB, raw string) relay.Subscriber {
	t.Helper()
	return open(t, raw, "OpenSubscriber", relay.OpenSubscriber)
}

func open[T interface{ Close() error }](t testing.TB, raw, what string, openFn func(context.Context, string) (T, error)) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), OpenTimeout)
	defer cancel()
	v, err := openFn(ctx, raw)
	if err != nil {
		t.Fatalf("%s(%s): %v", what, relay.Redact(raw), err)
	}
	t.Cleanup(func() { _ = v.Close() })
	return v
}

// Provision creates topic's durable topology for p's group, failing the
// test if that takes longer than ProvisionTimeout or returns an error.
// It blocks until Provision returns.
func Provision(t testing.TB, p relay.Provisioner, topic string) {
	t.Helper()
	ProvisionWithin(t, p, topic, ProvisionTimeout)
}

// ProvisionWithin is Provision with the time limit d instead of
// ProvisionTimeout.
func ProvisionWithin(t testing.TB, p relay.Provisioner, topic string, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := p.Provision(ctx, topic); err != nil {
		t.Fatalf("Provision(%s): %v", topic, err)
	}
}

// Publish publishes msgs to topic in one Publish call bounded by
// PublishTimeout and fails the test if it returns an error. It blocks until
// the publisher reports the outcome.
func Publish(t testing.TB, p relay.Publisher, topic string, msgs ...*relay.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), PublishTimeout)
	defer cancel()
	if err := p.Publish(ctx, topic, msgs...); err != nil {
		t.Fatalf("Publish(%s, %d messages): %v", topic, len(msgs), err)
	}
}

// Subscribe subscribes s to topic and returns the delivery channel and the
// function that ends the subscription. The subscription is also ended when
// the test finishes (the cancel function is registered with t.Cleanup, and
// calling it twice is harmless). A Subscribe error fails the test.
func Subscribe(t testing.TB, s relay.Subscriber, topic string) (<-chan *relay.Message, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := s.Subscribe(ctx, topic)
	if err != nil {
		cancel()
		t.Fatalf("Subscribe(%s): %v", topic, err)
	}
	return ch, cancel
}

// Next returns the next message from ch. It fails the test, naming what
// was awaited, if ch is closed or nothing arrives within WaitLimit.
func Next(t testing.TB, ch <-chan *relay.Message, what string) *relay.Message {
	t.Helper()
	timer := time.NewTimer(WaitLimit)
	defer timer.Stop()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatalf("%s: channel closed", what)
		}
		return m
	case <-timer.C:
		t.Fatalf("%s: nothing within %v", what, WaitLimit)
	}
	return nil
}

// Quiet returns a message that arrives on ch within d, or nil if none does.
// A closed channel also yields nil at once. Tests use it to check that
// nothing (more) is delivered.
func Quiet(ch <-chan *relay.Message, d time.Duration) *relay.Message {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case m := <-ch:
		return m
	case <-timer.C:
		return nil
	}
}

// Unique returns prefix followed by "-" and a fresh relay ID, a name no
// other test or run uses.
func Unique(prefix string) string { return prefix + "-" + relay.NewID() }
