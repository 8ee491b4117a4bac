package nats_test

import (
	"context"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-relay/relay"
	relaynats "github.com/go-relay/relay/adapters/nats"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// natsURL is the server the tests use (RELAY_TEST_NATS_URL or the local
// one); the test fails (CI) or skips when it is unreachable.
func natsURL(t testing.TB) string {
	t.Helper()
	return testenv.NATS(t)
}

// rawJS is a plain nats.go connection and JetStream context on the test
// server, closed at cleanup.
func rawJS(t testing.TB) (*natsgo.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := natsgo.Connect(natsURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

func openPub(t testing.TB, kv ...string) relay.Publisher {
	t.Helper()
	return relaytest.OpenPublisher(t, testenv.WithParams(natsURL(t), kv...))
}

func openSub(t testing.TB, group string, kv ...string) relay.Subscriber {
	t.Helper()
	return relaytest.OpenSubscriber(t, testenv.WithParams(natsURL(t), append([]string{"group", group}, kv...)...))
}

// deleteStreamOf deletes the stream the adapter created for topic, if any.
func deleteStreamOf(server, topic string) {
	nc, err := natsgo.Connect(server)
	if err != nil {
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = js.DeleteStream(ctx, relaynats.StreamName(topic))
}
