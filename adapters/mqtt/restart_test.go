package mqtt_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// Across a broker restart (sessions saved): the publisher reports
// unhealthy while the broker is down, a Publish started during the outage
// succeeds once it is back, and the running subscription, without being
// restarted, takes the message it held unacked as the one the broker
// resends (not delivered twice; acked on the new connection) and
// receives what is published once it subscribed again.
func TestBrokerRestart(t *testing.T) {
	b := testenv.StartMosquitto(t)
	ctx := context.Background()
	pub := openPub(t, b.URL())
	sub := openSub(t, b.URL(), "g")
	topic := "restart/test"
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	held := relay.NewMessage([]byte("held across the restart"))
	if err := pub.Publish(ctx, topic, held); err != nil {
		t.Fatal(err)
	}
	got := receive(t, ch, 1)[0]
	if got.ID != held.ID {
		t.Fatalf("got %q, want %q", got.ID, held.ID)
	}

	b.Stop()
	hc := pub.(relay.HealthChecker)
	for hc.Health() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	during := relay.NewMessage([]byte("published during the outage"))
	published := make(chan error, 1)
	go func() {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		published <- pub.Publish(pctx, topic, during)
	}()
	b.Restart(1)
	if err := <-published; err != nil {
		t.Fatalf("Publish started during the outage: %v", err)
	}
	if err := got.Ack(); err != nil {
		t.Fatal(err)
	}
	after := relay.NewMessage([]byte("published after"))
	if err := pub.Publish(ctx, topic, after); err != nil {
		t.Fatalf("Publish after the restart: %v", err)
	}
	// "during" may have reached the broker before the subscription
	// subscribed again, and been dropped then (mosquitto 2.0.11 does not
	// restore shared subscriptions): it may be missing, nothing else.
	for m := range ch {
		switch m.ID {
		case after.ID:
			_ = m.Ack()
			if extra := noneWithin(ch, 300*time.Millisecond); extra != nil {
				t.Fatalf("%s (%s) delivered after the last message", extra.ID, extra.Payload)
			}
			return
		case during.ID:
			_ = m.Ack()
		default:
			t.Fatalf("got %s (%s) attempt %d after the restart", m.ID, m.Payload, m.Attempt())
		}
	}
}
