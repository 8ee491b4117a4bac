package watermill_test

import (
	"context"
	"fmt"
	"net/url"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/go-relay/relay"
	wm "github.com/go-relay/relay/compat/watermill"
)

// Watermill code consumes from a relay backend: here mem://, any relay
// URL works the same way.
func ExampleNewSubscriber() {
	ctx := context.Background()
	p, _ := relay.OpenPublisher(ctx, "mem://example-sub")
	s, _ := relay.OpenSubscriber(ctx, "mem://example-sub?group=billing")
	pub, sub := wm.NewPublisher(p, wm.Options{}), wm.NewSubscriber(s, wm.Options{})
	defer pub.Close()
	defer sub.Close()

	msgs, _ := sub.Subscribe(ctx, "orders")
	m := message.NewMessage("0190a0f0-0000-7000-8000-000000000001", []byte("order 1"))
	m.Metadata.Set("relay_key", "customer-7") // becomes relay's Key
	_ = pub.Publish("orders", m)

	got := <-msgs
	rm := wm.RelayMessage(got)
	fmt.Println(got.UUID, string(got.Payload), rm.Key, rm.Topic(), wm.Attempt(got))
	got.Ack()
	// Output: 0190a0f0-0000-7000-8000-000000000001 order 1 customer-7 orders 1
}

// A Watermill Pub/Sub becomes reachable by relay URL, here as
// watermill+example-gochannel://, for relay.OpenPublisher,
// relay.OpenSubscriber and the bridge.
func ExampleRegister() {
	gc := gochannel.NewGoChannel(gochannel.Config{}, nil)
	wm.Register("example-gochannel", wm.Opener{
		NewPublisher: func(ctx context.Context, u *url.URL) (message.Publisher, error) { return client{gc}, nil },
		NewSubscriber: func(ctx context.Context, u *url.URL, group string) (message.Subscriber, error) {
			return client{gc}, nil // a broker with groups would be configured with group here
		},
		Config: wm.BackendConfig{Capabilities: relay.Capabilities{Ordering: relay.OrderNone}},
	})
	defer gc.Close()

	ctx := context.Background()
	s, _ := relay.OpenSubscriber(ctx, "watermill+example-gochannel://?group=g")
	defer s.Close()
	ch, _ := s.Subscribe(ctx, "events")
	p, _ := relay.OpenPublisher(ctx, "watermill+example-gochannel://")
	defer p.Close()
	_ = p.Publish(ctx, "events", &relay.Message{ID: "e-1", Key: "k", Payload: []byte("hello")})

	m := <-ch
	fmt.Println(m.ID, m.Key, string(m.Payload), m.Attempt())
	_ = m.Ack()
	// Output: e-1 k hello 1
}
