package watermill_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/go-relay/relay"
	wm "github.com/go-relay/relay/compat/watermill"
	"github.com/go-relay/relay/driver/drivertest"
)

// gochannelCaps is what Watermill's GoChannel honestly has: in process
// only, nothing kept for a subscription that does not exist yet, and no
// order (it sends each message from a goroutine of its own).
var gochannelCaps = relay.Capabilities{
	Backend:             "watermill+gochannel",
	Durable:             false,
	CrossProcess:        false,
	Ordering:            relay.OrderNone,
	RetainedBeforeGroup: "dropped: GoChannel delivers only to subscriptions that exist when a message is published",
}

// shared is the one GoChannel every watermill+gochannel-test:// URL of
// this test binary reaches, as every mem://NAME reaches one broker.
// Its relay clients must not close it: closing a client ends that client's
// subscriptions only.
var shared = gochannel.NewGoChannel(gochannel.Config{}, nil)

// client is a GoChannel as one client sees it: Close ends nothing but the
// client (the subscriptions end with their ctx).
type client struct{ *gochannel.GoChannel }

func (client) Close() error { return nil }

func init() {
	wm.Register("gochannel-test", wm.Opener{
		NewPublisher: func(ctx context.Context, u *url.URL) (message.Publisher, error) {
			return client{shared}, nil
		},
		NewSubscriber: func(ctx context.Context, u *url.URL, group string) (message.Subscriber, error) {
			return client{shared}, nil
		},
		Config: wm.BackendConfig{Capabilities: gochannelCaps},
	})
}

// TestConformanceGoChannel runs relay's conformance suite against
// Watermill's GoChannel as a relay backend (through Register and the URL
// path). What GoChannel cannot do is declared, so the suite skips it with
// the reason printed: groups and competing consumers (every subscription
// receives every message), redelivery after a subscription ended
// (GoChannel drops unsettled messages then), ordering, a size limit, a
// broker to restart or hang.
func TestConformanceGoChannel(t *testing.T) {
	const base = "watermill+gochannel-test://"
	drivertest.Run(t, drivertest.Harness{
		NewPublisher: func(t testing.TB) relay.Publisher {
			p, err := relay.OpenPublisher(context.Background(), base)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		NewSubscriber: func(t testing.TB, group string) relay.Subscriber {
			s, err := relay.OpenSubscriber(context.Background(), base+"?group="+group)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		PublisherURL:         base,
		SubscriberURL:        func(group string) string { return base + "?group=" + group },
		NoGroups:             "GoChannel has no consumer groups: every subscription receives every message",
		NoCompetingConsumers: "GoChannel has no consumer groups: two subscriptions of one topic each receive every message",
		NoRedeliveryAfterEnd: "GoChannel drops what a closed subscription left unsettled; only a Nack on a live subscription is redelivered (to that subscription)",
		HungBrokerSkip:       "GoChannel is in process: there is no connection to hang",
	})
}
