package bridge_test

import (
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/go-relay/relay/adapters/mqtt"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// --- MQTT: paho.mqtt.golang on a mosquitto of the benchmark's own ---

// benchInstance is the instance= of relay's MQTT subscribers in the
// benchmark, so that drop can name their sessions.
const benchInstance = "bench"

// mqttBackend is a mosquitto started for the benchmark b (the shared one
// keeps at most 1000 queued messages per session): backlogs kept whole,
// and as many unacknowledged messages in flight per session as the
// bridge's window.
func mqttBackend(b *testing.B) benchBackend {
	u := testenv.StartMosquitto(b, "max_queued_messages 0", "max_inflight_messages 1024", "autosave_interval 3600").URL()
	return benchBackend{"mqtt", u, func(g string) string {
		return testenv.WithParams(u, "group", g, "instance", benchInstance)
	}, &rawMQTT{url: u}}
}

type rawMQTT struct{ url string }

func (r *rawMQTT) client(b *testing.B, id string, clean bool, handler paho.MessageHandler) paho.Client {
	o := paho.NewClientOptions().AddBroker("tcp://" + strings.TrimPrefix(r.url, "mqtt://")).SetClientID(id).
		SetCleanSession(clean).SetProtocolVersion(4).SetAutoReconnect(false).SetAutoAckDisabled(true)
	if handler != nil {
		o.SetDefaultPublishHandler(handler)
	}
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		b.Fatalf("mqtt: connecting as %s: %v", id, tok.Error())
	}
	return c
}

func rawSessionID(topic, group string) string { return "raw-" + group + "-" + topic }

// prepare creates the raw consumer's persistent session, subscribed to
// the group's shared subscription, as relay's Provision does.
func (r *rawMQTT) prepare(b *testing.B, topic, group string) {
	c := r.client(b, rawSessionID(topic, group), false, nil)
	if tok := c.Subscribe("$share/"+group+"/"+topic, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		b.Fatalf("mqtt: subscribing: %v", tok.Error())
	}
	c.Disconnect(100)
}

// consume connects the session, which the broker then sends its backlog
// (up to max_inflight_messages unacknowledged: the window), and acks each
// message from this goroutine.
func (r *rawMQTT) consume(b *testing.B, topic, group string, window int) rawResult {
	msgs := make(chan paho.Message, window)
	c := r.client(b, rawSessionID(topic, group), false, func(_ paho.Client, m paho.Message) { msgs <- m })
	defer c.Disconnect(100)
	var start time.Time
	var busy time.Duration
	for got := 0; got < benchMessages; got++ {
		select {
		case m := <-msgs:
			m.Ack()
		case <-time.After(time.Minute):
			b.Fatalf("mqtt: consumed %d of %d", got, benchMessages)
		}
		if got == 0 {
			start, busy = time.Now(), machineBusy()
		}
	}
	return rawResult{rate: drainRate(benchMessages, 1, start), calls: -1, busy: machineBusy() - busy}
}

// publish: one connection; each batch published at QoS 1 with a relay ID
// ahead of the payload (what relay's envelope carries), its PUBACKs
// awaited.
func (r *rawMQTT) publish(b *testing.B, topic string, batch, workers int) rawResult {
	c := r.client(b, "raw-pub-"+benchID(), true, nil)
	defer c.Disconnect(100)
	body := make([]byte, benchPayload)
	rate := runParallel(b, batch, workers, func(n int) error {
		toks := make([]paho.Token, n)
		for i := range toks {
			toks[i] = c.Publish(topic, 1, false, append([]byte(benchID()+benchID()+benchID()), body...))
		}
		for _, tok := range toks {
			if tok.Wait(); tok.Error() != nil {
				return tok.Error()
			}
		}
		return nil
	})
	return rawResult{rate: rate, calls: -1}
}

// drop removes the persistent sessions of groups on topic (relay's first
// one and the raw consumer's), with what they still hold.
func (r *rawMQTT) drop(topic string, groups ...string) {
	for _, g := range groups {
		for _, id := range []string{mqtt.SessionID(g, benchInstance, topic, 1), rawSessionID(topic, g)} {
			o := paho.NewClientOptions().AddBroker("tcp://" + strings.TrimPrefix(r.url, "mqtt://")).SetClientID(id).SetCleanSession(true)
			c := paho.NewClient(o)
			if tok := c.Connect(); tok.WaitTimeout(10*time.Second) && tok.Error() == nil {
				c.Disconnect(100)
			}
		}
	}
}
