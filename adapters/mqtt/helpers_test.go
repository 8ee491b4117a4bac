package mqtt_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/mqtt"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// sessions are the session IDs the tests used; TestMain removes them from
// the shared broker (they are persistent: they would stay there, each
// subscribed to a topic nobody publishes to again).
var sessions struct {
	sync.Mutex
	ids []string
}

func TestMain(m *testing.M) {
	mqtt.TrackSessions(trackSession)
	code := m.Run()
	removeSessions(testenv.URL("RELAY_TEST_MQTT_URL", testenv.DefaultMQTTURL), sessions.ids)
	if code == 0 {
		if err := goleak.Find(testenv.ProxyGoroutines()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func trackSession(id string) {
	sessions.Lock()
	sessions.ids = append(sessions.ids, id)
	sessions.Unlock()
}

// removeSessions connects with a clean session under each ID, which makes
// the broker discard the persistent session of that ID.
func removeSessions(broker string, ids []string) {
	if testenv.Reachable(broker) != nil {
		return
	}
	for _, id := range ids {
		c := rawClient(broker, id, true, nil)
		if tok := c.Connect(); tok.WaitTimeout(5*time.Second) && tok.Error() == nil {
			c.Disconnect(100)
		}
	}
}

// pahoBroker is the host:port of an mqtt:// URL in paho's form.
func pahoBroker(raw string) string {
	return "tcp://" + strings.TrimPrefix(strings.SplitN(raw, "?", 2)[0], "mqtt://")
}

// rawClient is a plain paho client (MQTT 3.1.1, manual acks when handler
// is set, no reconnect) on the broker of the mqtt:// URL raw.
func rawClient(raw, id string, clean bool, handler paho.MessageHandler) paho.Client {
	o := paho.NewClientOptions().AddBroker(pahoBroker(raw)).SetClientID(id).SetCleanSession(clean).
		SetProtocolVersion(4).SetAutoReconnect(false).SetAutoAckDisabled(true)
	if handler != nil {
		o.SetDefaultPublishHandler(handler)
	}
	return paho.NewClient(o)
}

func mqttURL(t testing.TB) string { return testenv.MQTT(t) }

func newName(prefix string) string {
	id := strings.ReplaceAll(relay.NewID(), "-", "")
	return prefix + id[len(id)-12:]
}

func openPub(t testing.TB, base string, kv ...string) relay.Publisher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := relay.OpenPublisher(ctx, testenv.WithParams(base, kv...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func openSub(t testing.TB, base, group string, kv ...string) relay.Subscriber {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := relay.OpenSubscriber(ctx, testenv.WithParams(base, append([]string{"group", group}, kv...)...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// receive takes n messages from ch, failing after 20s.
func receive(t testing.TB, ch <-chan *relay.Message, n int) []*relay.Message {
	t.Helper()
	var out []*relay.Message
	timeout := time.After(20 * time.Second)
	for len(out) < n {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatalf("channel closed after %d of %d messages", len(out), n)
			}
			out = append(out, m)
		case <-timeout:
			t.Fatalf("received %d of %d messages within 20s", len(out), n)
		}
	}
	return out
}
