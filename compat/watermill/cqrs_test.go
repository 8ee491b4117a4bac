package watermill_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/go-relay/relay"
	wm "github.com/go-relay/relay/compat/watermill"
)

type orderPlaced struct {
	OrderID string `json:"order_id"`
	Total   int    `json:"total"`
}

// Watermill's CQRS component runs on relay unchanged: an event published
// on the EventBus reaches the EventProcessor's handler, whose group is
// its handler name; the handler's ctx reaches the relay message.
func TestCQRSOnRelay(t *testing.T) {
	base := memURL(t)
	rp, err := relay.OpenPublisher(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	pub := wm.NewPublisher(rp, wm.Options{})
	logger := watermill.NopLogger{}
	marshaler := cqrs.JSONMarshaler{}
	topic := func(name string) string { return "events." + name }

	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	processor, err := cqrs.NewEventProcessorWithConfig(router, cqrs.EventProcessorConfig{
		GenerateSubscribeTopic: func(p cqrs.EventProcessorGenerateSubscribeTopicParams) (string, error) {
			return topic(p.EventName), nil
		},
		SubscriberConstructor: func(p cqrs.EventProcessorSubscriberConstructorParams) (message.Subscriber, error) {
			s, err := relay.OpenSubscriber(context.Background(), base+"?group="+p.HandlerName)
			if err != nil {
				return nil, err
			}
			return wm.NewSubscriber(s, wm.Options{}), nil
		},
		Marshaler: marshaler,
		Logger:    logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		ev      orderPlaced
		attempt int
		topic   string
	}
	got := make(chan seen, 1)
	if err := processor.AddHandlers(cqrs.NewEventHandler("billing", func(ctx context.Context, ev *orderPlaced) error {
		rm := wm.RelayMessageFromContext(ctx)
		if rm == nil {
			t.Error("the handler's ctx does not reach the relay message")
			return nil
		}
		got <- seen{*ev, rm.Attempt(), rm.Topic()}
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	bus, err := cqrs.NewEventBusWithConfig(pub, cqrs.EventBusConfig{
		GeneratePublishTopic: func(p cqrs.GenerateEventPublishTopicParams) (string, error) { return topic(p.EventName), nil },
		Marshaler:            marshaler,
		Logger:               logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	<-router.Running()

	if err := bus.Publish(ctx, &orderPlaced{OrderID: "o-1", Total: 42}); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if s.ev != (orderPlaced{OrderID: "o-1", Total: 42}) || s.attempt != 1 || s.topic != "events.watermill_test.orderPlaced" {
			t.Errorf("handler saw %+v attempt %d topic %q", s.ev, s.attempt, s.topic)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the event did not reach its handler")
	}
	if err := router.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
}
