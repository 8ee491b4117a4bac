package memory_test

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/adaptertest"
	"github.com/go-relay/relay/adapters/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	const broker = "conformance"
	adaptertest.Run(t, adaptertest.Harness{
		NewPublisher: func(t testing.TB) relay.Publisher {
			p, err := relay.OpenPublisher(context.Background(), "mem://"+broker)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		NewSubscriber: func(t testing.TB, group string) relay.Subscriber {
			s, err := memory.NewSubscriber(broker, memory.SubscriberConfig{Group: group})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		PublisherURL:  "mem://" + broker,
		SubscriberURL: func(group string) string { return "mem://" + broker + "?group=" + group },
	})
}

// max_bytes bounds a published message.
func TestMaxBytesParam(t *testing.T) {
	ctx := context.Background()
	p, err := relay.OpenPublisher(ctx, "mem://"+relay.NewID()+"?max_bytes=1000")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	err = p.Publish(ctx, "t", relay.NewMessage(make([]byte, 2000)))
	var le *relay.LimitError
	if !errors.As(err, &le) || le.Limit != 1000 {
		t.Errorf("max_bytes=1000: publishing 2000 bytes = %v, want a *relay.LimitError with limit 1000", err)
	}
}
