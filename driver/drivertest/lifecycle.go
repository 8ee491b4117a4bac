package drivertest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

func contextCancel(t *testing.T, e *env) {
	sub := e.sub(t, e.h.NewGroup(t))
	topic := e.h.NewTopic(t)
	provision(t, sub, topic)
	ch, cancel := subscribe(t, sub, topic)
	cancel()
	expectClosed(t, ch, "Subscribe ctx cancelled", 10*time.Second)
	ctx, c2 := context.WithCancel(context.Background())
	c2()
	if _, err := sub.Subscribe(ctx, topic); err == nil {
		t.Errorf("Subscribe with a done ctx succeeded")
	}
}

func closeSemantics(t *testing.T, e *env) {
	pub := e.h.NewPublisher(t)
	sub := e.h.NewSubscriber(t, e.h.NewGroup(t))
	t1, t2 := e.h.NewTopic(t), e.h.NewTopic(t)
	provision(t, sub, t1)
	provision(t, sub, t2)
	ch1, _ := subscribe(t, sub, t1)
	ch2, _ := subscribe(t, sub, t2)
	publish(t, pub, t1, relay.NewMessage([]byte("held")))
	held := e.next(t, ch1, "held")

	done := make(chan error, 1)
	go func() { done <- sub.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Subscriber.Close did not return within 30s")
	}
	for i, ch := range []<-chan *relay.Message{ch1, ch2} {
		select {
		case _, ok := <-ch:
			if ok {
				t.Errorf("channel %d delivered after Close", i+1)
			}
		default:
			t.Errorf("channel %d still open when Close returned", i+1)
		}
	}
	if err := held.Ack(); !errors.Is(err, relay.ErrSubscriptionEnded) {
		t.Errorf("Ack after Close = %v, want ErrSubscriptionEnded", err)
	}
	if err := sub.Close(); err != nil {
		t.Errorf("second Subscriber.Close: %v", err)
	}
	if _, err := sub.Subscribe(context.Background(), t1); !errors.Is(err, relay.ErrClosed) {
		t.Errorf("Subscribe after Close = %v, want ErrClosed", err)
	}
	if err := pub.Close(); err != nil {
		t.Errorf("Publisher.Close: %v", err)
	}
	if err := pub.Close(); err != nil {
		t.Errorf("second Publisher.Close: %v", err)
	}
	if err := pub.Publish(context.Background(), t1, relay.NewMessage([]byte("late"))); !errors.Is(err, relay.ErrClosed) {
		t.Errorf("Publish after Close = %v, want ErrClosed", err)
	}
}

func oversize(t *testing.T, e *env) {
	max := e.caps.MaxMessageBytes
	if max <= 0 {
		t.Skipf("SKIP: backend %q declares no message size limit", e.caps.Backend)
	}
	if max > 256<<20 {
		t.Skipf("SKIP: limit %d bytes is too large to test in memory", max)
	}
	pub := e.pub(t)
	topic := e.h.NewTopic(t)
	ok := relay.NewMessage([]byte("fits"))
	big := relay.NewMessage(make([]byte, max+1))
	err := pub.Publish(context.Background(), topic, ok, big)
	if !errors.Is(err, relay.ErrMessageTooLarge) {
		t.Fatalf("Publish of %d bytes (limit %d) = %v, want ErrMessageTooLarge", max+1, max, err)
	}
	var le *relay.LimitError
	if !errors.As(err, &le) || le.MessageID != big.ID {
		t.Fatalf("error %v is not a *relay.LimitError naming message %s", err, big.ID)
	}
	// The error says what sets the limit, so that the reader knows which
	// knob to turn (driver.SizeError builds it from the capabilities).
	if le.Limit != max || le.SetBy == "" || le.SetBy != e.caps.MaxMessageBytesSetBy ||
		!strings.Contains(err.Error(), fmt.Sprintf("limit %d, set by %s", max, le.SetBy)) {
		t.Errorf("error %q (SetBy %q), want it to give the limit %d and what sets it (Capabilities.MaxMessageBytesSetBy %q, non-empty)",
			err, le.SetBy, max, e.caps.MaxMessageBytesSetBy)
	}
	t.Logf("%d-byte payload refused: %v", max+1, err)
}

func strictURL(t *testing.T, e *env) {
	if e.h.PublisherURL == "" || e.h.SubscriberURL == nil {
		t.Skip("SKIP: harness gives no URLs")
	}
	add := func(raw string) string {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("harness URL %q: %v", raw, err)
		}
		q := u.Query()
		q.Set("no_such_option", "1")
		u.RawQuery = q.Encode()
		return u.String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opens := []struct {
		url  string
		open func(string) (interface{ Close() error }, error)
	}{
		{add(e.h.PublisherURL), func(u string) (interface{ Close() error }, error) { return relay.OpenPublisher(ctx, u) }},
		{add(e.h.SubscriberURL(e.h.NewGroup(t))), func(u string) (interface{ Close() error }, error) { return relay.OpenSubscriber(ctx, u) }},
	}
	for _, o := range opens {
		c, err := o.open(o.url)
		if err == nil {
			_ = c.Close()
			t.Errorf("opening %q succeeded, want an error for the unknown parameter", relay.Redact(o.url))
			continue
		}
		var ue *relay.URLError
		if !errors.Is(err, relay.ErrBadURL) || !errors.As(err, &ue) || !strings.Contains(err.Error(), "no_such_option") {
			t.Errorf("opening %q: %v, want a *relay.URLError naming no_such_option", relay.Redact(o.url), err)
		}
	}
	// The subscriber URL without a group.
	if u, err := url.Parse(e.h.SubscriberURL("x")); err == nil {
		q := u.Query()
		if q.Has("group") {
			q.Del("group")
			u.RawQuery = q.Encode()
			if s, err := relay.OpenSubscriber(ctx, u.String()); err == nil {
				_ = s.Close()
				t.Logf("note: %s accepts a subscriber URL without group=", e.caps.Backend)
			}
		}
	}
}

func reconnect(t *testing.T, e *env) {
	if e.h.Restart == nil {
		t.Skipf("SKIP: the %q harness has no Restart hook (no broker process to restart)", e.caps.Backend)
	}
	topic := e.h.NewTopic(t)
	pub := e.pub(t)
	sub := e.sub(t, e.h.NewGroup(t))
	provision(t, sub, topic)
	ch, _ := subscribe(t, sub, topic)
	before := relay.NewMessage([]byte("before restart"))
	publish(t, pub, topic, before)
	e.collect(t, ch, ids([]*relay.Message{before}), true)
	e.h.Restart(t)
	after := relay.NewMessage([]byte("after restart"))
	publish(t, pub, topic, after)
	e.collect(t, ch, ids([]*relay.Message{after}), true)
	t.Logf("publish and consume resumed after a broker restart")
}
