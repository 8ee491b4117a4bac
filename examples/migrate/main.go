// Command migrate walks through moving a topic from RabbitMQ to Kafka with
// relay's bridge, on real brokers, and checks that every service sees every
// order exactly once throughout.
//
// The phases are those of README.md in this directory, with the same bridge
// configs (phase1.yaml, phase2.yaml) that `relay bridge -c` runs in
// production; here the bridge runs in process.
//
//	phase 0  legacy: the producer and the services billing and shipping use RabbitMQ
//	phase 1  bridge RabbitMQ → Kafka; shipping moves to Kafka
//	phase 2  bridge both ways; the producer moves to Kafka (a straggler stays)
//	phase 3  billing moves to Kafka: its Kafka group is created first, then
//	         the RabbitMQ consumer drains; duplicates of the overlap are
//	         skipped by message ID, which the bridge preserves
//	phase 4  the bridge stops: RabbitMQ can be retired
//
// It exits 0 when every service saw every order exactly once.
//
//	docker compose up -d --wait     # RabbitMQ and Kafka (see docker-compose.yml)
//	go run ./examples/migrate -rabbit amqp://guest:guest@127.0.0.1:5672/ -kafka kafka://127.0.0.1:9092
//
// It uses two brokers, so it takes two URLs the way the other examples
// take -broker: -rabbit wins over $RABBIT (default
// amqp://guest:guest@127.0.0.1:5672/), -kafka over $KAFKA (default
// kafka://127.0.0.1:9092; `make kafka` starts one without Docker).
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-relay/relay"
	_ "github.com/go-relay/relay/adapters/amqp"
	_ "github.com/go-relay/relay/adapters/kafka"
	"github.com/go-relay/relay/bridge"
)

//go:embed phase1.yaml
var phase1 []byte

//go:embed phase2.yaml
var phase2 []byte

func main() {
	rabbit := rabbitFlag(flag.CommandLine)
	kafka := kafkaFlag(flag.CommandLine)
	orders := flag.Int("orders", 5, "orders published per step")
	timeout := flag.Duration("timeout", 2*time.Minute, "give up after this long")
	verbose := flag.Bool("v", false, "show the bridge's logs")
	flag.Parse()
	logOut := io.Discard
	if *verbose {
		logOut = os.Stderr
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(logOut, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, os.Stdout, *rabbit, *kafka, *orders); err != nil {
		fmt.Fprintln(os.Stderr, "migrate:", err)
		os.Exit(1)
	}
}

// rabbitFlag defines -rabbit on fs.
func rabbitFlag(fs *flag.FlagSet) *string {
	return envFlag(fs, "rabbit", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ URL")
}

// kafkaFlag defines -kafka on fs.
func kafkaFlag(fs *flag.FlagSet) *string {
	return envFlag(fs, "kafka", "kafka://127.0.0.1:9092", "Kafka URL")
}

// envFlag defines the string flag -name on fs, whose default is $NAME, else def.
func envFlag(fs *flag.FlagSet, name, def, usage string) *string {
	v := os.Getenv(strings.ToUpper(name))
	if v == "" {
		v = def
	}
	return fs.String(name, v, fmt.Sprintf("%s (default $%s, else %s)", usage, strings.ToUpper(name), def))
}

// migration is the state of one walk-through.
type migration struct {
	out           io.Writer
	rabbit, kafka string
	topic         string
	perStep       int
	env           func(string) (string, bool)

	published []string // IDs of every order, in publish order
	services  map[string]*service
	bridge    *runningBridge
}

func run(ctx context.Context, out io.Writer, rabbit, kafka string, perStep int) error {
	topic := "orders-" + relay.NewID()[24:]
	m := &migration{out: out, rabbit: rabbit, kafka: kafka, topic: topic, perStep: perStep,
		services: map[string]*service{}}
	m.env = func(k string) (string, bool) {
		switch k {
		case "RABBIT_URL":
			return rabbit, true
		case "KAFKA_URL":
			return kafka, true
		case "TOPIC":
			return topic, true
		case "RELAY_HTTP":
			return "127.0.0.1:0", true
		}
		return "", false
	}
	defer m.stopAll()
	if err := preflight(ctx, rabbit, kafka); err != nil {
		return err
	}
	return m.walk(ctx)
}

// connectWithin bounds the first connection to each broker, so that a
// broker that is down or unreachable is named within seconds rather than
// when -timeout runs out with the bridge still waiting for it.
const connectWithin = 5 * time.Second

// preflight connects to RabbitMQ and to Kafka once, each within
// connectWithin, and says which one cannot be reached.
func preflight(ctx context.Context, rabbit, kafka string) error {
	for _, b := range []struct{ name, url, flag string }{{"RabbitMQ", rabbit, "-rabbit"}, {"Kafka", kafka, "-kafka"}} {
		cctx, cancel := context.WithTimeout(ctx, connectWithin)
		pub, err := relay.OpenPublisher(cctx, b.url)
		cancel()
		if err != nil {
			return fmt.Errorf("%s is unreachable at %s (no connection within %s): %w\n"+
				"start the brokers with `docker compose up -d --wait`, or give the right URL with %s",
				b.name, relay.Redact(b.url), connectWithin, err, b.flag)
		}
		_ = pub.Close()
	}
	return nil
}

func (m *migration) say(format string, args ...any) { fmt.Fprintf(m.out, format+"\n", args...) }

func (m *migration) walk(ctx context.Context) error {
	m.say("topic %s", m.topic)

	m.say("phase 0  legacy: producer and services billing, shipping on RabbitMQ")
	for _, name := range []string{"billing", "shipping"} {
		s := &service{name: name, seen: map[string]int{}}
		m.services[name] = s
		if err := s.consume(ctx, m.rabbit, m.topic, ""); err != nil {
			return err
		}
	}
	// The poison topic needs a queue so that poisoned orders are kept.
	if err := provision(ctx, m.rabbit, m.topic+".poison", "ops", ""); err != nil {
		return err
	}
	if err := m.step(ctx, m.rabbit, "rabbitmq"); err != nil {
		return err
	}

	m.say("phase 1  bridge RabbitMQ → Kafka (phase1.yaml); shipping moves to Kafka")
	if err := m.startBridge(ctx, phase1, "phase1.yaml"); err != nil {
		return err
	}
	if err := m.move(ctx, "shipping"); err != nil {
		return err
	}
	if err := m.step(ctx, m.rabbit, "rabbitmq"); err != nil {
		return err
	}

	m.say("phase 2  bridge both ways (phase2.yaml); the producer moves to Kafka, a straggler stays on RabbitMQ")
	m.bridge.stop()
	if err := m.startBridge(ctx, phase2, "phase2.yaml"); err != nil {
		return err
	}
	if err := m.step(ctx, m.kafka, "kafka"); err != nil {
		return err
	}
	if err := m.step(ctx, m.rabbit, "rabbitmq (straggler)"); err != nil {
		return err
	}

	m.say("phase 3  billing moves to Kafka")
	if err := m.move(ctx, "billing"); err != nil {
		return err
	}
	if err := m.step(ctx, m.kafka, "kafka"); err != nil {
		return err
	}

	m.say("phase 4  every producer and consumer is on Kafka: the bridge stops, RabbitMQ can be retired")
	looped := m.bridge.looped()
	m.bridge.stop()
	m.say("         the bridge cut %d echo(es) of orders that had come from the other side", looped)
	return m.verdict()
}

// move switches a service from RabbitMQ to Kafka without a gap: its Kafka
// group is created first (start=latest: from now on), then the RabbitMQ
// consumer finishes what it has and stops, then the Kafka consumer starts.
// Orders that reached both meanwhile are seen twice and skipped by ID.
func (m *migration) move(ctx context.Context, name string) error {
	s := m.services[name]
	if err := provision(ctx, m.kafka, m.topic, name, "latest"); err != nil {
		return err
	}
	if err := s.waitFor(ctx, m.published); err != nil {
		return err
	}
	s.stop()
	if err := s.consume(ctx, m.kafka, m.topic, "latest"); err != nil {
		return err
	}
	m.say("         %s now consumes from Kafka", name)
	return nil
}

// step publishes orders on one broker and waits until every service saw
// every order published so far.
func (m *migration) step(ctx context.Context, brokerURL, where string) error {
	pub, err := relay.OpenPublisher(ctx, brokerURL)
	if err != nil {
		return err
	}
	defer pub.Close()
	var msgs []*relay.Message
	for i := 0; i < m.perStep; i++ {
		o := relay.NewMessage([]byte(fmt.Sprintf(`{"order":%d,"from":%q}`, len(m.published)+i+1, where)))
		o.Key = fmt.Sprintf("customer-%d", i%3)
		msgs = append(msgs, o)
	}
	if err := pub.Publish(ctx, m.topic, msgs...); err != nil {
		return fmt.Errorf("publishing on %s: %w", where, err)
	}
	for _, o := range msgs {
		m.published = append(m.published, o.ID)
	}
	var got []string
	for _, name := range m.sortedServices() {
		s := m.services[name]
		if err := s.waitFor(ctx, m.published); err != nil {
			return err
		}
		got = append(got, fmt.Sprintf("%s@%s %d/%d", name, s.where(m.kafka), s.unique(), len(m.published)))
	}
	m.say("         %d orders published on %s → %s", len(msgs), where, strings.Join(got, ", "))
	return nil
}

func (m *migration) sortedServices() []string {
	var names []string
	for n := range m.services {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (m *migration) verdict() error {
	var errs []error
	for _, name := range m.sortedServices() {
		s := m.services[name]
		s.mu.Lock()
		for _, id := range m.published {
			if s.seen[id] != 1 {
				errs = append(errs, fmt.Errorf("%s saw order %s %d times", name, id, s.seen[id]))
			}
		}
		if len(s.seen) != len(m.published) {
			errs = append(errs, fmt.Errorf("%s saw %d orders, %d were published", name, len(s.seen), len(m.published)))
		}
		m.say("%-9s handled %d orders once each; skipped %d duplicate(s) by ID while moving", name, len(s.seen), s.dups)
		s.mu.Unlock()
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	m.say("OK: every service handled every order exactly once, wherever it was published")
	return nil
}

func (m *migration) stopAll() {
	if m.bridge != nil {
		m.bridge.stop()
	}
	for _, s := range m.services {
		s.stop()
	}
}

// runningBridge is a bridge running in process, as `relay bridge` runs it.
type runningBridge struct {
	b      *bridge.Bridge
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func (m *migration) startBridge(ctx context.Context, cfgYAML []byte, file string) error {
	cfg, err := bridge.Parse(cfgYAML, file, m.env)
	if err != nil {
		return err
	}
	b, err := bridge.New(*cfg, bridge.Options{Logger: slog.Default()})
	if err != nil {
		return err
	}
	bctx, cancel := context.WithCancel(context.Background())
	rb := &runningBridge{b: b, cancel: cancel, done: make(chan error, 1)}
	go func() { rb.done <- b.Run(bctx) }()
	m.bridge = rb
	for b.Ready() != nil {
		select {
		case <-ctx.Done():
			return fmt.Errorf("bridge not ready: %w", b.Ready())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

func (rb *runningBridge) stop() {
	rb.once.Do(func() {
		rb.cancel()
		if err := <-rb.done; err != nil {
			slog.Error("bridge drain", "err", err)
		}
	})
}

// looped reads relay_bridge_looped_total from the bridge's metrics.
func (rb *runningBridge) looped() int {
	rec := httptest.NewRecorder()
	rb.b.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	total := 0
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, "relay_bridge_looped_total{") {
			var v float64
			_, _ = fmt.Sscanf(line[strings.LastIndexByte(line, ' ')+1:], "%g", &v)
			total += int(v)
		}
	}
	return total
}

// provision creates group on topic so that messages are kept for it
// before it consumes; start is a Kafka start position ("" for RabbitMQ).
func provision(ctx context.Context, brokerURL, topic, group, start string) error {
	sub, err := relay.OpenSubscriber(ctx, groupURL(brokerURL, group, start))
	if err != nil {
		return err
	}
	defer sub.Close()
	if p, ok := sub.(relay.Provisioner); ok {
		return p.Provision(ctx, topic)
	}
	return nil
}

func groupURL(raw, group, start string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	q.Set("group", group)
	if start != "" {
		q.Set("start", start)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// service is a consumer that handles each order once, by ID, whichever
// broker delivers it.
type service struct {
	name string

	mu      sync.Mutex
	seen    map[string]int
	dups    int
	broker  string
	sub     relay.Subscriber
	cancel  context.CancelFunc
	done    chan struct{}
	changed chan struct{}
}

func (s *service) consume(ctx context.Context, brokerURL, topic, start string) error {
	sub, err := relay.OpenSubscriber(ctx, groupURL(brokerURL, s.name, start))
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(sctx, topic)
	if err != nil {
		cancel()
		_ = sub.Close()
		return err
	}
	s.mu.Lock()
	s.broker, s.sub, s.cancel, s.done = brokerURL, sub, cancel, make(chan struct{})
	if s.changed == nil {
		s.changed = make(chan struct{}, 1)
	}
	done := s.done
	s.mu.Unlock()
	go func() {
		defer close(done)
		for msg := range ch {
			s.mu.Lock()
			if s.seen[msg.ID] > 0 {
				s.dups++ // the same order via the other broker: skip it
			} else {
				s.seen[msg.ID] = 1
			}
			s.mu.Unlock()
			_ = msg.Ack()
			select {
			case s.changed <- struct{}{}:
			default:
			}
		}
	}()
	return nil
}

func (s *service) stop() {
	s.mu.Lock()
	cancel, sub, done := s.cancel, s.sub, s.done
	s.cancel, s.sub = nil, nil
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
	_ = sub.Close()
}

func (s *service) unique() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

func (s *service) where(kafka string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broker == kafka {
		return "kafka"
	}
	return "rabbitmq"
}

// waitFor waits until the service saw every ID of ids.
func (s *service) waitFor(ctx context.Context, ids []string) error {
	for {
		s.mu.Lock()
		missing := 0
		for _, id := range ids {
			if s.seen[id] == 0 {
				missing++
			}
		}
		s.mu.Unlock()
		if missing == 0 {
			return nil
		}
		select {
		case <-s.changed:
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("%s is missing %d of %d orders: %w", s.name, missing, len(ids), ctx.Err())
		}
	}
}
