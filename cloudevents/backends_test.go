package cloudevents_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	_ "github.com/go-relay/relay/adapters/amqp"
	_ "github.com/go-relay/relay/adapters/kafka"
	_ "github.com/go-relay/relay/adapters/memory"
	relaynats "github.com/go-relay/relay/adapters/nats"
	_ "github.com/go-relay/relay/adapters/postgres"
	_ "github.com/go-relay/relay/adapters/redisstream"
	_ "github.com/go-relay/relay/adapters/sqs"
	"github.com/go-relay/relay/cloudevents"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

var (
	sqsOnce sync.Once
	sqsSvc  *testenv.SQSService
	// pgSchema is this run's own PostgreSQL schema, dropped at the end.
	pgSchema = "relay_test_ce_" + strings.ToLower(suffix())
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sqsSvc != nil {
		sqsSvc.Stop()
	}
	dropSchema()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func dropSchema() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, testenv.URL("RELAY_TEST_POSTGRES_URL", testenv.DefaultPostgresURL))
	if err != nil {
		return
	}
	defer c.Close(ctx)
	_, _ = c.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{pgSchema}.Sanitize()+" CASCADE")
}

func suffix() string {
	id := strings.ReplaceAll(relay.NewID(), "-", "")
	return id[len(id)-12:]
}

// backend gives the publisher and subscriber URLs of one backend for a
// test, and registers the cleanup of what the test creates there.
type backend struct {
	name string
	urls func(t *testing.T, topic, group string) (pub, sub string)
}

var backends = []backend{
	{"mem", func(t *testing.T, topic, group string) (string, string) {
		u := "mem://ce-" + suffix()
		return u, u + "?group=" + group
	}},
	{"redis", func(t *testing.T, topic, group string) (string, string) {
		u := testenv.Redis(t)
		return u, testenv.WithParams(u, "group", group)
	}},
	{"amqp", func(t *testing.T, topic, group string) (string, string) {
		u := testenv.AMQP(t)
		t.Cleanup(func() { deleteAMQP(t, u, topic, group) })
		return u, testenv.WithParams(u, "group", group)
	}},
	{"kafka", func(t *testing.T, topic, group string) (string, string) {
		seeds := kafkaSeeds(t)
		q := url.Values{}
		for _, s := range seeds[1:] {
			q.Add("seed", s)
		}
		q.Set("metadata_min_age", "50ms")
		pub := "kafka://" + seeds[0] + "?" + q.Encode()
		q.Set("group", group)
		q.Set("start", "earliest")
		q.Set("heartbeat_interval", "100ms")
		q.Set("session_timeout", "6s")
		q.Set("fetch_max_wait", "200ms")
		return pub, "kafka://" + seeds[0] + "?" + q.Encode()
	}},
	{"sqs", func(t *testing.T, topic, group string) (string, string) { return sqsURL(t), sqsURL(t) }}, // the queue is the group
	{"nats", func(t *testing.T, topic, group string) (string, string) {
		u := testenv.NATS(t)
		t.Cleanup(func() { deleteStream(u, topic) })
		return u, testenv.WithParams(u, "group", group)
	}},
	{"postgres", func(t *testing.T, topic, group string) (string, string) {
		u := testenv.WithParams(testenv.Postgres(t), "schema", pgSchema)
		return u, testenv.WithParams(u, "group", group)
	}},
}

// sqsURL is the sqs:// URL of the test service (goaws unless
// RELAY_TEST_SQS_ENDPOINT says otherwise), started on first use.
func sqsURL(t *testing.T) string {
	sqsOnce.Do(func() { sqsSvc = testenv.StartSQS() })
	sqsSvc.Need(t)
	q := url.Values{}
	q.Set("region", sqsSvc.Region)
	if sqsSvc.Endpoint != "" {
		q.Set("endpoint", sqsSvc.Endpoint)
	}
	if sqsSvc.Emulated {
		q.Set("access_key_id", "test")
		q.Set("secret_key", "test")
	}
	return "sqs://?" + q.Encode()
}

// kafkaSeeds is the real cluster of RELAY_TEST_KAFKA_BROKERS or a kfake
// cluster for this test.
func kafkaSeeds(t *testing.T) []string {
	if b := testenv.KafkaBrokers(t); b != nil {
		return b
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

func deleteAMQP(t *testing.T, u, topic, group string) {
	conn, err := amqp091.Dial(u)
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	_, _ = ch.QueueDelete(topic+"."+group, false, false, false)
	_ = ch.ExchangeDelete(topic, false, false)
}

func deleteStream(u, topic string) {
	nc, err := natsgo.Connect(u)
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

// events are what the round trip sends: every attribute with values that
// need escaping somewhere and binary data; only the required attributes
// and no data; JSON data with a content type; 15 attributes.
func events() []*cloudevents.Event {
	full := sample()
	full.ID = "full-" + suffix()
	minimal := &cloudevents.Event{ID: "min-" + suffix(), Source: "urn:relay:test", SpecVersion: "1.0", Type: "t.minimal"}
	js := &cloudevents.Event{ID: "json-" + suffix(), Source: "/json", SpecVersion: "1.0", Type: "t.json",
		DataContentType: "application/json", Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Extensions: map[string]string{"a1": "x", "b2": "y", "c3": "z", "d4": "w", "e5": "v"},
		Data:       []byte(`{"order":"A-1001","total":12.5}`)}
	// more attributes than SQS's 10 message attributes: the sqs adapter
	// packs the rest into one attribute, and they still come back.
	many := &cloudevents.Event{ID: "many-" + suffix(), Source: "/many", SpecVersion: "1.0", Type: "t.many",
		Extensions: map[string]string{}, Data: []byte("text data")}
	for i := range 12 {
		many.Extensions[fmt.Sprintf("ext%02d", i)] = fmt.Sprintf("value %d ü", i)
	}
	return []*cloudevents.Event{full, minimal, js, many}
}

// open opens a publisher and a subscribed subscriber of a fresh topic on
// b, all closed at cleanup.
func open(t *testing.T, b backend, prefix string) (relay.Publisher, <-chan *relay.Message, string) {
	t.Helper()
	topic := prefix + suffix()
	pubURL, subURL := b.urls(t, topic, "g"+suffix())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub, err := relay.OpenPublisher(ctx, pubURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	sub, err := relay.OpenSubscriber(ctx, subURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	if p, ok := sub.(relay.Provisioner); ok {
		relaytest.Provision(t, p, topic)
	}
	ch, _ := relaytest.Subscribe(t, sub, topic)
	return pub, ch, topic
}

// TestRoundTripEveryBackend publishes events with cloudevents.Publisher
// and decodes what the subscriber receives with FromMessage, on every
// backend: every attribute and the data must come back as sent.
func TestRoundTripEveryBackend(t *testing.T) {
	wantBinding := map[string]string{"mem": "generic", "redis": "generic", "amqp": "amqp", "kafka": "kafka",
		"sqs": "generic", "nats": "nats", "postgres": "generic"}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			pub, ch, topic := open(t, b, "ce-rt-")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cp := cloudevents.NewPublisher(pub)
			if got := cp.Binding().Name(); got != wantBinding[b.name] {
				t.Fatalf("binding %s, want %s", got, wantBinding[b.name])
			}
			sent := events()
			if err := cp.Publish(ctx, topic, sent...); err != nil {
				t.Fatal(err)
			}
			want := map[string]*cloudevents.Event{}
			for _, e := range sent {
				want[e.ID] = e
			}
			for range sent {
				m := relaytest.Next(t, ch, "event")
				got, err := cloudevents.FromMessage(m)
				if err != nil {
					t.Fatalf("FromMessage(%s): %v (metadata %v)", m.ID, err, m.Metadata)
				}
				if m.ID != got.ID {
					t.Errorf("message ID %q, event id %q", m.ID, got.ID)
				}
				w, ok := want[got.ID]
				if !ok {
					t.Fatalf("unexpected event %q", got.ID)
				}
				delete(want, got.ID)
				assertEvent(t, got, w)
				if pk := w.Extensions[cloudevents.ExtPartitionKey]; m.Key != pk {
					t.Errorf("message Key %q, want the partitionkey %q", m.Key, pk)
				}
				if err := m.Ack(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestNATSWireIsTheBinding reads what cloudevents.Publisher writes on
// NATS with plain nats.go: in binary mode the attributes must be the
// binding's "ce-" headers, with percent-encoded values, and the data the
// message data; in structured mode the Content-Type header marks it. Any
// CloudEvents NATS consumer then reads them.
func TestNATSWireIsTheBinding(t *testing.T) {
	u := testenv.NATS(t)
	topic := "ce-wire-" + suffix()
	t.Cleanup(func() { deleteStream(u, topic) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub, err := relay.OpenPublisher(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	// A relay subscriber provisions the stream; the raw consumer reads it.
	sub, err := relay.OpenSubscriber(ctx, testenv.WithParams(u, "group", "g"))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	relaytest.Provision(t, sub.(relay.Provisioner), topic)
	e := sample()
	if err := cloudevents.NewPublisher(pub).Publish(ctx, topic, e); err != nil {
		t.Fatal(err)
	}
	se := sample()
	se.ID = "structured-1" // the same id would be a JetStream duplicate
	if err := cloudevents.NewPublisher(pub).PublishStructured(ctx, topic, se); err != nil {
		t.Fatal(err)
	}
	nc, err := natsgo.Connect(u)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, relaynats.StreamName(topic))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"ce-specversion": "1.0", "ce-id": e.ID, "ce-source": e.Source, "ce-type": e.Type,
		"ce-subject":         "A-1001%20%22rush%22%20100%25%20caf%C3%A9",
		"ce-time":            "2026-12-01T10:30:00.123456789Z",
		"ce-datacontenttype": "application/octet-stream;%20x=1",
		"ce-dataschema":      e.DataSchema, "ce-partitionkey": "customer-7", "ce-priority": "5",
		"ce-traceparent": e.Extensions["traceparent"], "ce-emptyext": "",
	}
	for k, v := range want {
		if got, ok := raw.Header[k]; !ok || len(got) != 1 || got[0] != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if string(raw.Data) != string(e.Data) {
		t.Errorf("data %q, want %q", raw.Data, e.Data)
	}
	// Structured mode: the binding's Content-Type header, the JSON event
	// as the data.
	raw, err = st.GetMsg(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := raw.Header["Content-Type"]; len(got) != 1 || got[0] != cloudevents.StructuredContentType {
		t.Errorf("Content-Type header %q, want %q (headers %v)", got, cloudevents.StructuredContentType, raw.Header)
	}
	doc, _ := cloudevents.EncodeJSON(se)
	if string(raw.Data) != string(doc) {
		t.Errorf("data %s, want %s", raw.Data, doc)
	}
}
