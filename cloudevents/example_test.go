package cloudevents_test

import (
	"context"
	"fmt"
	"log"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/cloudevents"
)

// Publish an event on mem:// and read it back. On kafka://, amqp:// or
// nats:// the same code writes that broker's CloudEvents binding.
func Example() {
	ctx := context.Background()
	pub, err := relay.OpenPublisher(ctx, "mem://ce-example")
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	sub, err := relay.OpenSubscriber(ctx, "mem://ce-example?group=billing")
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	msgs, err := sub.Subscribe(ctx, "orders")
	if err != nil {
		log.Fatal(err)
	}

	events := cloudevents.NewPublisher(pub)
	err = events.Publish(ctx, "orders", &cloudevents.Event{
		ID: "A-1001", Source: "/shop/orders", Type: "com.example.order.placed",
		DataContentType: "application/json",
		Extensions:      map[string]string{"partitionkey": "customer-7"},
		Data:            []byte(`{"order":"A-1001"}`),
	})
	if err != nil {
		log.Fatal(err)
	}

	m := <-msgs
	e, err := cloudevents.FromMessage(m)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(events.Binding().Name(), m.ID, m.Key, m.Metadata["ce-type"])
	fmt.Println(e.Type, e.DataContentType, string(e.Data))
	_ = m.Ack()
	// Output:
	// generic A-1001 customer-7 com.example.order.placed
	// com.example.order.placed application/json {"order":"A-1001"}
}
