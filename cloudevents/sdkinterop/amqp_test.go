package sdkinterop

import (
	"context"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/go-relay/relay"
	_ "github.com/go-relay/relay/adapters/amqp"
	"github.com/go-relay/relay/cloudevents"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// The SDK's AMQP protocol speaks AMQP 1.0, which RabbitMQ's 0.9.1 port
// does not. These tests take the SDK's event and binding types and apply
// the AMQP binding's rules over amqp091-go: attributes are application
// properties (0.9.1 headers, which RabbitMQ maps to and from AMQP 1.0
// application-properties) named cloudEvents_ or cloudEvents:,
// datacontenttype is the content-type property, the data is the body.

// rabbit is a plain amqp091 channel on the test broker; topic's exchange
// and the queue of group are deleted at cleanup.
func rabbit(t *testing.T, topic, group string) (string, *amqp091.Channel) {
	t.Helper()
	u := testenv.AMQP(t)
	conn, err := amqp091.Dial(u)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(topic+"."+group, false, false, false)
		_ = ch.ExchangeDelete(topic, false, false)
		_ = conn.Close()
	})
	return u, ch
}

func amqpSubscribe(t *testing.T, u, topic, group string) <-chan *relay.Message {
	t.Helper()
	sub, err := relay.OpenSubscriber(context.Background(), testenv.WithParams(u, "group", group))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	relaytest.Provision(t, sub.(relay.Provisioner), topic)
	ch, _ := relaytest.Subscribe(t, sub, topic)
	return ch
}

// TestAMQPSDKToRelay: the SDK's attributes as AMQP application
// properties, with either separator; once as native AMQP types
// (timestamp, long, boolean: what an AMQP 1.0 producer sends, as RabbitMQ
// hands them to 0.9.1 consumers) and once as canonical strings. AMQP
// 0.9.1 timestamps have whole seconds, so the native case sends a time
// without fractions.
func TestAMQPSDKToRelay(t *testing.T) {
	for _, tc := range []struct {
		name   string
		prefix string
		native bool
		time   time.Time
	}{
		{"colon-native", "cloudEvents:", true, time.Date(2026, 12, 1, 10, 30, 0, 0, time.UTC)},
		{"underscore-strings", "cloudEvents_", false, time.Date(2026, 12, 1, 10, 30, 0, 123456789, time.UTC)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic, group := "ce-sdk-"+suffix(), "g"
			u, raw := rabbit(t, topic, group)
			ch := amqpSubscribe(t, u, topic, group)

			ev := sdkEvent(t, tc.time)
			w := encodeWithSDK(t, ev, tc.prefix, tc.native)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := raw.PublishWithContext(ctx, topic, "", false, false, amqp091.Publishing{
				Headers: amqp091.Table(w.headers), ContentType: w.contentType, Body: w.data,
				DeliveryMode: amqp091.Persistent,
			}); err != nil {
				t.Fatal(err)
			}
			m := relaytest.Next(t, ch, "the SDK's event")
			e, err := cloudevents.FromMessage(m)
			if err != nil {
				t.Fatalf("FromMessage: %v (metadata %v)", err, m.Metadata)
			}
			sameAsSDK(t, e, ev, 0)
			_ = m.Ack()
		})
	}
}

// TestAMQPRelayToSDK: relay publishes with cloudevents.Publisher; a plain
// amqp091 consumer gets the delivery and the SDK, applying the AMQP
// binding's rules, decodes every attribute and the data.
func TestAMQPRelayToSDK(t *testing.T) {
	topic, group := "ce-relay-"+suffix(), "g"
	u, raw := rabbit(t, topic, group)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The relay subscriber only declares the queue the raw consumer reads.
	sub, err := relay.OpenSubscriber(ctx, testenv.WithParams(u, "group", group))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	relaytest.Provision(t, sub.(relay.Provisioner), topic)
	pub, err := relay.OpenPublisher(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	e := relayEvent()
	if err := cloudevents.NewPublisher(pub).Publish(ctx, topic, e); err != nil {
		t.Fatal(err)
	}

	var d amqp091.Delivery
	for {
		var ok bool
		if d, ok, err = raw.Get(topic+"."+group, true); err != nil {
			t.Fatal(err)
		} else if ok {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("no delivery within 30s")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if d.ContentType != e.DataContentType {
		t.Errorf("content-type property %q, want datacontenttype %q", d.ContentType, e.DataContentType)
	}
	if d.MessageId != e.ID {
		t.Errorf("message_id %q, want the event id", d.MessageId)
	}
	msg := &binaryMessage{prefixes: []string{"cloudEvents_", "cloudEvents:"}, headers: map[string]any(d.Headers),
		contentType: d.ContentType, data: d.Body}
	sameAsSDK(t, e, decodeWithSDK(t, msg), 0)
}
