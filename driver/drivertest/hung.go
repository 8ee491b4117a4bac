package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// CloseBound is the contract's bound on Publisher.Close and
// Subscriber.Close when the broker stopped answering (docs/contract.md,
// "What every backend promises"): the shared layer's close timeout for the teardown of the
// subscriptions or for Publish calls in progress, plus as much again for
// the client to give up on its connections.
const CloseBound = 2 * driver.DefaultCloseTimeout

// closeMargin is added to CloseBound in the check, so that a loaded
// machine does not fail it; it is not part of the contract.
const closeMargin = 5 * time.Second

// hungBrokerClose: with a message acked (a settlement to flush), one held
// unsettled (one to release) and a Publish in progress, the broker stops
// answering; Subscriber.Close and Publisher.Close still return within
// CloseBound (plus a margin), every channel is closed, and no goroutine is
// left behind (checked by the suite after every check).
func hungBrokerClose(t *testing.T, e *env) {
	if e.h.HungBroker == nil {
		why := e.h.HungBrokerSkip
		if why == "" {
			why = "the harness has no HungBroker hook"
		}
		t.Skipf("SKIP: %s", why)
	}
	hb := e.h.HungBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub, err := relay.OpenPublisher(ctx, hb.PublisherURL)
	if err != nil {
		t.Fatalf("opening a publisher through the proxy: %v", err)
	}
	defer pub.Close()
	group := e.h.NewGroup(t)
	sub, err := relay.OpenSubscriber(ctx, hb.SubscriberURL(group))
	if err != nil {
		t.Fatalf("opening a subscriber through the proxy: %v", err)
	}
	defer sub.Close()
	topic := e.h.NewTopic(t)
	provision(t, sub, topic)
	ch, _ := subscribe(t, sub, topic)
	a, b := relay.NewMessage([]byte("acked before the hang")), relay.NewMessage([]byte("held across the hang"))
	publish(t, pub, topic, a, b)
	got := []*relay.Message{e.next(t, ch, "first message"), e.next(t, ch, "second message")}

	hb.Hang()
	if err := got[0].Ack(); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	published := make(chan error, 1)
	go func() {
		// No deadline: only Close may end it.
		published <- pub.Publish(context.Background(), topic, relay.NewMessage([]byte("published into the hang")))
	}()

	limit := CloseBound + closeMargin
	timed := func(what string, close func() error) {
		t.Helper()
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- close() }()
		select {
		case err := <-done:
			took := time.Since(start)
			t.Logf("%s against a hung broker returned after %v (err: %v)", what, took.Round(time.Millisecond), err)
			if took > limit {
				t.Errorf("%s took %v against a hung broker, over the contract's bound of %v (plus a %v margin)", what, took.Round(time.Millisecond), CloseBound, closeMargin)
			}
		case <-time.After(limit + time.Minute):
			t.Fatalf("%s did not return within %v against a hung broker", what, limit+time.Minute)
		}
	}
	timed("Subscriber.Close", sub.Close)
	select {
	case _, ok := <-ch:
		if ok {
			t.Errorf("channel delivered after Close")
		}
	default:
		t.Errorf("channel still open when Subscriber.Close returned")
	}
	timed("Publisher.Close", pub.Close)
	// Close returns once the Publish in progress has been cancelled and
	// its send has returned; the Publish call itself then returns at the
	// next scheduling point, so the check waits for it instead of reading
	// the channel at once (a loaded machine lost that race).
	select {
	case err := <-published:
		if err == nil {
			t.Logf("note: the Publish in progress succeeded: the client had sent it before the hang took hold")
		}
	case <-time.After(publishReturnWait):
		t.Errorf("Publish in progress still running %v after Publisher.Close returned", publishReturnWait)
	}
}

// publishReturnWait is how long the check waits, after Publisher.Close
// returned, for the cancelled Publish call to return: scheduling slack,
// not part of the contract.
const publishReturnWait = 2 * time.Second
