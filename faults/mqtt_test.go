//go:build faults

package faults

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/mqtt"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// The MQTT rows run on private mosquittos (testenv.StartMosquitto; the
// shared one on 1883 is never restarted), configured as docs/mqtt.md
// asks: max_queued_messages 0, so that a backlog or an away session's
// share is kept whole.

// TestKillMQTT: MQTT redelivers a session's unacknowledged messages only
// to that session, when it connects again: a killed consumer's messages
// come back when its instance does. A child process (instance "child")
// takes killHold messages and holds them unacked, a member of the same
// group (instance "member") consumes in this process, the child is
// SIGKILLed, and then its instance comes back (here, in this process),
// takes the session the kernel let go of with the child, and gets the
// held messages, resent marked DUP, with the rest of the session's share.
func TestKillMQTT(t *testing.T) {
	broker := testenv.StartMosquitto(t, "max_queued_messages 0", "max_inflight_messages "+strconv.Itoa(killHold))
	base := broker.URL()
	start := time.Now()
	topic, group := unique("faults-kill"), unique("g")
	childURL := testenv.WithParams(base, "group", group, "instance", "child", "inflight", strconv.Itoa(killHold))
	memberURL := testenv.WithParams(base, "group", group, "instance", "member", "inflight", "64")
	l := newLedger()
	member := openSub(t, memberURL)
	provision(t, member, topic)
	first := openSub(t, childURL)
	provision(t, first, topic) // the child's session: half the messages are its
	_ = first.Close()
	pub := openPub(t, base)
	publishAll(t, l, pub, topic, batchOf(killTotal, 64, "mqtt"), 50, nil)

	cmd := startHolder(t, childURL, topic)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	ch, err := member.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	consume(l, ch, &wg)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	back := openSub(t, childURL)
	ch2, err := back.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	consume(l, ch2, &wg)
	l.waitAll(90 * time.Second)
	cancel()
	_ = member.Close()
	_ = back.Close()
	wg.Wait()
	record(t, l.result(t, "consumer SIGKILL", "mqtt",
		"child held "+strconv.Itoa(killHold)+" unacked of "+strconv.Itoa(killTotal)+
			"; the broker resent them to the child's session when its instance came back"), start)
}

// TestRestartMQTT: mosquitto stopped (SIGTERM: it saves sessions and
// queued messages) and started again mid-stream. mosquitto 2.0.11 does
// not restore shared subscriptions from its persistence file, so the
// group's messages are dropped until its member subscribes again: the
// publisher, behind a proxy, is cut off until then (docs/mqtt.md, Limits).
func TestRestartMQTT(t *testing.T) {
	broker := testenv.StartMosquitto(t, "max_queued_messages 0")
	base := broker.URL()
	proxied, proxy := testenv.ProxyURL(t, base)
	restartScenario(t, "mqtt", proxied, testenv.WithParams(base, "group", unique("g"), "inflight", "64"), func(t *testing.T) {
		proxy.Cut()
		broker.Stop()
		time.Sleep(time.Second) // an outage the clients notice
		broker.Restart(1)
		proxy.Uncut()
	})
}

func TestBacklogMQTT(t *testing.T) {
	// autosave_interval: not every second with 100 MB queued.
	broker := testenv.StartMosquitto(t, "max_queued_messages 0", "autosave_interval 3600")
	base := broker.URL()
	backlogScenario(t, "mqtt", base, func(g string, inflight int) string {
		return testenv.WithParams(base, "group", g, "inflight", strconv.Itoa(inflight))
	}, "")
}

// TestHostileMQTT: a plain paho client publishes random binary payloads
// (a third beginning with relay's envelope prefix and then unreadable:
// an unknown version, or lengths past the end), every fifth at QoS 0,
// interleaved with relay messages: every one is delivered, the foreign
// ones whole, the unreadable envelopes with the reason in metadata.
func TestHostileMQTT(t *testing.T) {
	base := testenv.MQTT(t)
	o := paho.NewClientOptions().AddBroker("tcp://" + strings.TrimPrefix(base, "mqtt://")).SetClientID(unique("hostile")).SetProtocolVersion(4)
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connecting paho: %v", tok.Error())
	}
	defer c.Disconnect(100)
	r := rand.New(rand.NewPCG(9, 10))
	var undecoded atomic.Int64
	hostileScenario(t, "mqtt", base, testenv.WithParams(base, "group", unique("g")), func(topic string) []string {
		var keys []string
		for i := 0; i < hostileTotal; i++ {
			body := hostileBody(r, i)
			switch i % 3 {
			case 1:
				body = append([]byte(mqtt.Magic+"\x02"), body...)
			case 2:
				body = append([]byte(mqtt.Magic+"\x01\xff\xff\xff\xff\x0f"), body...)
			}
			qos := byte(1)
			if i%5 == 0 {
				qos = 0
			}
			if tok := c.Publish(topic, qos, false, body); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				t.Errorf("publish %d: %v", i, tok.Error())
				continue
			}
			keys = append(keys, string(body))
		}
		return keys
	}, func(m *relay.Message) string {
		if bytes.HasPrefix(m.Payload, []byte(mqtt.Magic)) {
			if m.Metadata[mqtt.MetaDecodeError] == "" {
				t.Errorf("an unreadable envelope was delivered without %s: %q", mqtt.MetaDecodeError, m.Payload)
			}
			undecoded.Add(1)
		}
		if m.ID != mqtt.DerivedID(m.Payload) {
			t.Errorf("a foreign message's ID %s is not derived from its payload", m.ID)
		}
		return string(m.Payload)
	})
	t.Logf("%d unreadable envelopes delivered with %s", undecoded.Load(), mqtt.MetaDecodeError)
}
