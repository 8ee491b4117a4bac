//go:build faults

package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// The hostile-producer scenario: a non-relay producer using the broker's
// own client writes hostileTotal messages with random binary bodies and
// random headers / fields (relay's reserved names included, values of
// every type the protocol has), interleaved with relay messages. The relay
// subscriber must deliver every one of them and keep going. Messages are
// identified by something the foreign producer controls: the stream
// entry ID (or its "id" field) on Redis, the body on RabbitMQ and Kafka.
const hostileTotal = 500

// hostileName returns a header or field name: often one relay uses
// itself, sometimes empty, binary or long.
func hostileName(r *rand.Rand) string {
	reserved := []string{"id", "key", "payload", "md:", "md:x", "data", "body", "x-relay-key", "x-relay-attempt",
		"x-relay-", "relay-id", "relay-md-relay-x", "x-death", "x-delivery-count", "x-first-death-queue", ""}
	switch r.IntN(4) {
	case 0:
		return reserved[r.IntN(len(reserved))]
	case 1:
		return string(randBytes(r, 1+r.IntN(8)))
	case 2:
		return "h" + strconv.Itoa(r.IntN(1000))
	default:
		return fmt.Sprintf("long-%0200d", r.IntN(10))
	}
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.IntN(256))
	}
	return b
}

// hostileBody is random binary ending in a unique marker.
func hostileBody(r *rand.Rand, i int) []byte {
	return append(randBytes(r, r.IntN(64)), []byte("#hostile-"+strconv.Itoa(i))...)
}

// amqpValue is a random header value of any AMQP field type.
func amqpValue(r *rand.Rand) any {
	switch r.IntN(12) {
	case 0:
		return string(randBytes(r, r.IntN(16)))
	case 1:
		return randBytes(r, r.IntN(16))
	case 2:
		return r.Int64() - r.Int64()
	case 3:
		return int32(r.Uint32())
	case 4:
		return int16(r.Uint32())
	case 5:
		return r.Float64() * 1e6
	case 6:
		return r.IntN(2) == 0
	case 7:
		return time.Unix(r.Int64N(4e9), 0)
	case 8:
		return amqp091.Decimal{Scale: uint8(r.IntN(10)), Value: int32(r.Uint32())}
	case 9:
		return nil
	case 10:
		return []any{amqp091.Table{"queue": "q", "count": int64(r.IntN(9)), "reason": "rejected"}, "x", int32(3)}
	default:
		return amqp091.Table{"nested": string(randBytes(r, 4)), "n": int64(r.IntN(100))}
	}
}

// hostileScenario subscribes with subURL, runs produce (which publishes
// the foreign messages and returns the keys it expects, in order) while
// relay messages are published too, and reconciles by key(m).
func hostileScenario(t *testing.T, adapter, pubURL, subURL string, produce func(topic string) []string, key func(*relay.Message) string) {
	start := time.Now()
	topic := unique("faults-hostile")
	l := newLedger()
	sub := openSub(t, subURL)
	provision(t, sub, topic)
	pub := openPub(t, pubURL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m := range ch {
			if m.Metadata["faults"] == "relay" {
				l.receive(m.ID)
			} else {
				l.receive(key(m))
			}
			_ = m.Ack()
		}
	}()
	relayMsgs := batchOf(hostileTotal, 32, adapter)
	for _, m := range relayMsgs {
		m.Metadata = relay.Metadata{"faults": "relay"}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		publishAll(t, l, pub, topic, relayMsgs, 25, nil)
	}()
	keys := produce(topic)
	l.expectKeys(keys...)
	<-done
	l.waitAll(60 * time.Second)
	cancel()
	_ = sub.Close()
	wg.Wait()
	record(t, l.result(t, "hostile foreign producer", adapter,
		fmt.Sprintf("%d foreign messages (random binary bodies, random header names and types) + %d relay messages", len(keys), hostileTotal)), start)
}

func TestHostileRedis(t *testing.T) {
	base := redisURL(t)
	opts, err := redis.ParseURL(base)
	if err != nil {
		t.Fatal(err)
	}
	raw := redis.NewClient(opts)
	defer raw.Close()
	r := rand.New(rand.NewPCG(1, 2))
	hostileScenario(t, "redisstream", base, testenv.WithParams(base, "group", unique("g")), func(topic string) []string {
		var keys []string
		for i := 0; i < hostileTotal; i++ {
			var fields []any
			idField := ""
			for j := 0; j < 1+r.IntN(6); j++ {
				name := hostileName(r)
				var v any
				switch r.IntN(3) {
				case 0:
					v = randBytes(r, r.IntN(32))
				case 1:
					v = r.Int64()
				default:
					v = string(hostileBody(r, i))
				}
				if name == "id" {
					v = "hostile-id-" + strconv.Itoa(i) // a foreign ID must be unique to be reconciled
					idField = v.(string)
				}
				fields = append(fields, name, v)
			}
			id, err := raw.XAdd(context.Background(), &redis.XAddArgs{Stream: topic, Values: fields}).Result()
			if err != nil {
				t.Errorf("XADD %q: %v", fields, err)
				continue
			}
			if idField != "" {
				id = idField
			}
			keys = append(keys, id)
		}
		return keys
	}, func(m *relay.Message) string { return m.ID })
}

func TestHostileRabbitMQ(t *testing.T) {
	base := amqpURL(t)
	conn, err := amqp091.Dial(base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	chn, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	hostileScenario(t, "amqp", base, testenv.WithParams(base, "group", unique("g")), func(topic string) []string {
		var keys []string
		for i := 0; i < hostileTotal; i++ {
			h := amqp091.Table{}
			for j := 0; j < r.IntN(6); j++ {
				h[hostileName(r)] = amqpValue(r)
			}
			body := hostileBody(r, i)
			p := amqp091.Publishing{Headers: h, Body: body, DeliveryMode: amqp091.Persistent}
			if r.IntN(2) == 0 {
				p.MessageId = string(randBytes(r, r.IntN(10)))
				p.ContentType = string(randBytes(r, 5))
				p.Priority = uint8(r.IntN(256))
				p.Timestamp = time.Unix(r.Int64N(4e9), 0)
			}
			// relay's exchange per topic is a fanout/topic exchange named
			// after the topic; publish straight to it like any producer.
			if err := chn.PublishWithContext(context.Background(), topic, "", false, false, p); err != nil {
				t.Errorf("publish: %v", err)
				continue
			}
			keys = append(keys, string(body))
		}
		return keys
	}, func(m *relay.Message) string { return string(m.Payload) })
}

func TestHostileKafka(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	base := "kafka://" + addr
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r := rand.New(rand.NewPCG(5, 6))
	hostileScenario(t, "kafka (kfake)", base, testenv.WithParams(base, "group", unique("g")), func(topic string) []string {
		var keys []string
		for i := 0; i < hostileTotal; i++ {
			rec := &kgo.Record{Topic: topic, Value: hostileBody(r, i)}
			if r.IntN(2) == 0 {
				rec.Key = randBytes(r, r.IntN(16))
			}
			for j := 0; j < r.IntN(6); j++ {
				rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: hostileName(r), Value: randBytes(r, r.IntN(16))})
			}
			if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
				t.Errorf("produce: %v", err)
				continue
			}
			keys = append(keys, string(rec.Value))
		}
		return keys
	}, func(m *relay.Message) string { return string(m.Payload) })
}
