// Command checkout is relay's demo, and the first relay code to read.
//
// An order service publishes "order placed" events. Three services —
// inventory, email and analytics — each subscribe in their own group, so
// each gets its own copy of every order (publish/subscribe). Meanwhile a
// catalog publishes image-resize jobs to a work queue that three workers
// share in one group, so each job goes to one of them (competing consumers).
//
// The services run as router handlers with middleware (package router and
// package middleware), which is how real consumers cope with trouble:
//
//   - the email provider times out once: Retry sends the email again;
//   - one order is malformed: each service marks the error permanent, and
//     PoisonQueue moves the order to a poison topic, where an operator
//     (the "ops" subscriber) sees who rejected it and why, instead of the
//     order being redelivered forever;
//   - the order service's publish of one "charge card" command is retried
//     after a timeout, so the command arrives twice: Dedup lets payments
//     charge the card once.
//
// The program prints who got what, and exits 0 once every message was
// received and acked by everyone who should get it; it exits 1 if something
// is missing when -timeout runs out.
//
//	go run ./examples/checkout                          # in-process backend
//	go run ./examples/checkout -broker redis://127.0.0.1:6379/0
//	go run ./examples/checkout -broker amqp://guest:guest@127.0.0.1:5672/
//	go run ./examples/checkout -broker nats://127.0.0.1:4222
//	BROKER=redis://127.0.0.1:6379/0 go run ./examples/checkout
//	go run ./examples/checkout -broker sqlite://./checkout.db  # a file, no server
//
// -broker wins over $BROKER; the default is mem://checkout. The same code
// runs on any backend: only the URL changes. On a durable one a run can be
// split in two processes (-run r1 -stage publish, kill it, then -run r1
// -stage consume): what was published before the kill is all delivered.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/middleware"
	"github.com/go-relay/relay/router"

	_ "github.com/go-relay/relay/adapters/amqp"        // registers amqp://, amqps://
	_ "github.com/go-relay/relay/adapters/kafka"       // registers kafka://
	_ "github.com/go-relay/relay/adapters/memory"      // registers mem://
	_ "github.com/go-relay/relay/adapters/nats"        // registers nats://
	_ "github.com/go-relay/relay/adapters/redisstream" // registers redis://, rediss://
	_ "github.com/go-relay/relay/adapters/sqlite"      // registers sqlite://
)

// Order is the event the order service publishes.
type Order struct {
	ID    string `json:"id"`
	Email string `json:"email"`
	Items int    `json:"items"`
	Total string `json:"total"`
}

var orders = []Order{
	{ID: "A-1001", Email: "ana@example.com", Items: 2, Total: "59.90"},
	{ID: "A-1002", Email: "bo@example.com", Items: 1, Total: "12.50"},
	{ID: "A-1003", Email: "chen@example.com", Items: 5, Total: "230.00"},
}

// malformed is an order the order service got wrong: it cannot be decoded.
const malformed = `{"id": "A-1004", "items": "three"`

// flakyEmail is the order whose confirmation the email provider times out
// on at the first try.
const flakyEmail = "A-1002"

// services each subscribe in their own group, so each gets every order.
var services = []struct {
	group string
	act   func(Order) string
}{
	{"inventory", func(o Order) string { return fmt.Sprintf("reserve %d item(s) for %s", o.Items, o.ID) }},
	{"email", func(o Order) string { return fmt.Sprintf("send confirmation of %s to %s", o.ID, o.Email) }},
	{"analytics", func(o Order) string { return fmt.Sprintf("count %s, revenue +%s", o.ID, o.Total) }},
}

const (
	workers    = 3
	resizeJobs = 9
)

func main() {
	broker := brokerFlag(flag.CommandLine)
	timeout := flag.Duration("timeout", 30*time.Second, "give up if not everything arrived by then")
	var o Options
	flag.StringVar(&o.Run, "run", "", "name of the run (its topics and message IDs); default a fresh one")
	flag.StringVar(&o.Stage, "stage", "all", "all; publish: provision the groups, publish, then wait to be stopped before anyone consumes; consume: consume what -stage publish of the same -run published")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if _, err := run(ctx, os.Stdout, *broker, o); err != nil {
		fmt.Fprintln(os.Stderr, "checkout:", err)
		os.Exit(1)
	}
}

// brokerFlag defines -broker on fs.
func brokerFlag(fs *flag.FlagSet) *string {
	return envFlag(fs, "broker", "mem://checkout", "broker URL; subscribers add group=NAME to it")
}

// envFlag defines the string flag -name on fs, whose default is $NAME, else def.
func envFlag(fs *flag.FlagSet, name, def, usage string) *string {
	v := os.Getenv(strings.ToUpper(name))
	if v == "" {
		v = def
	}
	return fs.String(name, v, fmt.Sprintf("%s (default $%s, else %s)", usage, strings.ToUpper(name), def))
}

// Report is what the run received: acked message IDs per group, and how
// many jobs each worker did.
type Report struct {
	Acked  map[string]int // group -> distinct messages acked
	Worker map[string]int // worker -> jobs acked
	Topics []string       // the topics the run used
}

// run plays the story on broker and returns once every message was acked,
// or with an error when ctx ends first. With o.Stage "publish" it
// provisions every group, publishes and waits for ctx to end without
// consuming; with "consume" it consumes what that stage published.
func run(ctx context.Context, out io.Writer, broker string, o Options) (*Report, error) {
	runID := o.Run
	if runID == "" {
		id := relay.NewID()
		runID = id[len(id)-8:] // fresh topics per run, so a durable broker's old messages don't count
	}
	switch o.Stage {
	case "", "all", "publish", "consume":
	default:
		return nil, fmt.Errorf("-stage %q: want all, publish or consume", o.Stage)
	}
	// Message IDs are derived from the run, so that a consume stage
	// expects the messages its publish stage sent.
	newMessage := func(label string, body []byte) *relay.Message {
		return &relay.Message{ID: runID + "-" + label, Payload: body}
	}
	orderTopic := "order-placed-" + runID
	jobTopic := "image-resize-" + runID
	chargeTopic := "charge-card-" + runID
	poisonTopic := orderTopic + "-poison"
	fmt.Fprintf(out, "checkout demo on %s (run %s)\n\n", relay.Redact(broker), runID)

	pub, err := relay.OpenPublisher(ctx, broker)
	if err != nil {
		return nil, err
	}
	defer pub.Close()

	// Subscribe first: three groups on the order topic, three workers in one
	// group on the job topic. inflight=1 makes a worker take one job at a
	// time, so a busy worker leaves the next job to the others.
	t := newTally(out)
	var subs []relay.Subscriber
	var wg sync.WaitGroup
	stopRouter := func() {}
	shutdown := func() {
		stopRouter()
		for _, s := range subs {
			s.Close() // ends its subscriptions and closes their channels
		}
		wg.Wait()
	}
	defer shutdown()
	open := func(group, topic string, params ...string) (relay.Subscriber, error) {
		sub, err := relay.OpenSubscriber(ctx, withQuery(broker, append([]string{"group=" + group}, params...)...))
		if err != nil {
			return nil, err
		}
		subs = append(subs, sub)
		// Provision creates the group on a durable broker now, so the
		// messages published below are kept for it.
		if p, ok := sub.(relay.Provisioner); ok {
			if err := p.Provision(ctx, topic); err != nil && !errors.Is(err, relay.ErrNotSupported) {
				return nil, fmt.Errorf("provision %s for group %s: %w", topic, group, err)
			}
		}
		return sub, nil
	}
	subscribe := func(group, topic string, params ...string) (<-chan *relay.Message, error) {
		sub, err := open(group, topic, params...)
		if err != nil {
			return nil, err
		}
		return sub.Subscribe(ctx, topic)
	}

	// The order service's orders, its charge commands and the catalog's
	// resize jobs, and who should get each.
	// A broker that stores a message published twice with one ID only once
	// (NATS JetStream, within its duplicate window) drops the repeated
	// charge command itself; Dedup is there for repeats past that window
	// and for redeliveries.
	brokerDedups := false
	if cr, ok := pub.(relay.CapabilityReporter); ok {
		brokerDedups = cr.Capabilities().DeduplicatesByID
	}
	st := compose(t, brokerDedups, newMessage)
	topics := []string{orderTopic, jobTopic, chargeTopic, poisonTopic}
	publish := func() error { return st.publish(ctx, t, pub, orderTopic, chargeTopic, jobTopic, brokerDedups) }

	if o.Stage == "publish" {
		// Every group is created and nobody consumes: what is published
		// is kept for the consume stage, whatever happens to this process.
		for _, gt := range [][2]string{{services[0].group, orderTopic}, {services[1].group, orderTopic}, {services[2].group, orderTopic},
			{"payments", chargeTopic}, {"ops", poisonTopic}, {"resizers", jobTopic}} {
			if _, err := open(gt[0], gt[1]); err != nil {
				return nil, err
			}
		}
		if err := publish(); err != nil {
			return nil, err
		}
		t.printf("published run %s; this stage consumes nothing: waiting to be stopped\n", runID)
		<-ctx.Done()
		return &Report{Topics: topics}, nil
	}

	// The order consumers and payments run in one router. Middleware order:
	// PoisonQueue outside Retry, so an order is poisoned only after Retry
	// gave up (or at once for a permanent error); Dedup inside both.
	poison, err := middleware.PoisonQueue(middleware.PoisonConfig{Publisher: pub, Topic: poisonTopic})
	if err != nil {
		return nil, err
	}
	retry, err := middleware.Retry(middleware.RetryConfig{
		MaxAttempts:     3,
		InitialInterval: 50 * time.Millisecond,
		OnRetry: func(ctx context.Context, m *relay.Message, ev middleware.RetryEvent) {
			t.note("%s: %v; trying again in %v", router.HandlerName(ctx), ev.Err, ev.Delay.Round(time.Millisecond))
		},
	})
	if err != nil {
		return nil, err
	}
	// One process here, so an in-memory store; replicas of a real service
	// share middleware/dedupredis instead.
	dedup, err := middleware.Dedup(middleware.DedupConfig{Store: middleware.NewMemoryStore(middleware.MemoryStoreConfig{})})
	if err != nil {
		return nil, err
	}
	r, err := router.New(router.Config{CloseTimeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	stopRouter = func() { r.Close() } // drains: handlers in progress finish and their messages are acked
	if err := r.Use(poison, retry, middleware.Recoverer); err != nil {
		return nil, err
	}
	emailTries := map[string]int{}
	for _, s := range services {
		sub, err := open(s.group, orderTopic)
		if err != nil {
			return nil, err
		}
		err = r.AddHandler(s.group, sub, orderTopic, func(_ context.Context, m *relay.Message) ([]*relay.Message, error) {
			var o Order
			if err := json.Unmarshal(m.Payload, &o); err != nil {
				// Retrying cannot fix it: straight to the poison topic.
				return nil, relay.Permanent(fmt.Errorf("malformed order: %w", err))
			}
			if s.group == "email" && o.ID == flakyEmail {
				if emailTries[o.ID]++; emailTries[o.ID] == 1 {
					return nil, errors.New("email provider timed out")
				}
			}
			t.handled(m, m.ID, s.group, s.group, s.act(o))
			return nil, nil // the router acks the order
		})
		if err != nil {
			return nil, err
		}
	}
	paySub, err := open("payments", chargeTopic)
	if err != nil {
		return nil, err
	}
	err = r.AddHandler("payments", paySub, chargeTopic, func(_ context.Context, m *relay.Message) ([]*relay.Message, error) {
		t.handled(m, m.ID, "payments", "payments", "charge "+string(m.Payload))
		return nil, nil
	}, router.WithMiddleware(noteDuplicates(t), dedup))
	if err != nil {
		return nil, err
	}
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	select {
	case <-r.Running():
	case err := <-errc:
		return nil, err
	}

	// An operator watches the poison topic.
	poisoned, err := subscribe("ops", poisonTopic)
	if err != nil {
		return nil, err
	}
	wg.Go(func() {
		for m := range poisoned {
			md := m.Metadata
			// Each service's copy has an ID of its own; the original's
			// ID is in the metadata.
			t.ack(m, md.Get(middleware.PoisonOriginalIDKey)+"/"+md.Get(middleware.PoisonHandlerKey), "poison", "ops",
				fmt.Sprintf("order %s poisoned by %s: %s", m.Key, md.Get(middleware.PoisonHandlerKey), md.Get(middleware.PoisonReasonKey)))
		}
	})
	for w := 1; w <= workers; w++ {
		name := fmt.Sprintf("worker-%d", w)
		jobs, err := subscribe("resizers", jobTopic, "inflight=1")
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			for m := range jobs {
				time.Sleep(20 * time.Millisecond) // "resizing"
				t.ack(m, m.ID, "resizers", name, "resized "+string(m.Payload))
			}
		})
	}

	// The order service places its orders, and the catalog queues photos to
	// resize (unless an earlier -stage publish did).
	if o.Stage != "consume" {
		if err := publish(); err != nil {
			return nil, err
		}
	}

	select {
	case <-t.done:
	case <-ctx.Done():
	case err := <-errc:
		t.note("router stopped: %v", err)
	}
	shutdown()
	rep, err := t.report()
	rep.Topics = topics
	return rep, err
}

// noteDuplicates reports the duplicates that Dedup (inside it) acks
// without running the handler, through the middleware.Observer hook.
func noteDuplicates(t *tally) router.Middleware {
	return func(next router.Handler) router.Handler {
		return func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
			return next(middleware.WithObserver(ctx, dupNoter{t}), m)
		}
	}
}

type dupNoter struct{ t *tally }

func (d dupNoter) Deduplicated(ctx context.Context, m *relay.Message, _ string) {
	d.t.handled(m, m.ID, "duplicates", router.HandlerName(ctx), "duplicate of charge "+string(m.Payload)+" ignored: already charged")
}
func (dupNoter) Retried(context.Context, *relay.Message, middleware.RetryEvent) {}
func (dupNoter) Poisoned(context.Context, *relay.Message, error)                {}

// withQuery adds query parameters to a URL, keeping those it has:
// withQuery("mem://checkout", "group=email") is "mem://checkout?group=email",
// withQuery("sns://?region=eu-west-1", "group=email") is
// "sns://?region=eu-west-1&group=email".
func withQuery(rawURL string, params ...string) string {
	switch {
	case !strings.Contains(rawURL, "?"):
		rawURL += "?"
	case !strings.HasSuffix(rawURL, "?") && !strings.HasSuffix(rawURL, "&"):
		rawURL += "&"
	}
	return rawURL + strings.Join(params, "&")
}

// tally records what was acked, prints it, and closes done once every
// expected message was acked in every group that should get it.
type tally struct {
	out  io.Writer
	done chan struct{}

	mu       sync.Mutex
	want     map[string]map[string]bool // group -> IDs not acked yet
	got      map[string]map[string]bool // group -> IDs acked
	worker   map[string]int             // worker -> jobs acked
	finished bool
}

func newTally(out io.Writer) *tally {
	return &tally{out: out, done: make(chan struct{}),
		want: map[string]map[string]bool{}, got: map[string]map[string]bool{}, worker: map[string]int{}}
}

func (t *tally) expect(group, id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.want[group] == nil {
		t.want[group], t.got[group] = map[string]bool{}, map[string]bool{}
	}
	t.want[group][id] = true
}

// ack acks m and records it under key for group; who did it and what it
// did is printed. A message whose Ack fails is not counted: the broker
// redelivers it.
func (t *tally) ack(m *relay.Message, key, group, who, what string) {
	if err := m.Ack(); err != nil {
		t.note("%s: ack %s: %v", who, m.ID, err)
		return
	}
	t.handled(m, key, group, who, what)
}

// handled records m under key for group without acking it: a router
// handler's message is acked by the router when the handler returns nil
// (and the router's Close waits for that).
func (t *tally) handled(m *relay.Message, key, group, who, what string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	again := ""
	if m.Attempt() > 1 {
		again = fmt.Sprintf(" (attempt %d)", m.Attempt())
	}
	fmt.Fprintf(t.out, "  %-9s <- %s%s\n", who, what, again)
	if t.want[group][key] {
		delete(t.want[group], key)
		t.got[group][key] = true
		if group == "resizers" {
			t.worker[who]++
		}
	}
	for _, ids := range t.want {
		if len(ids) > 0 {
			return
		}
	}
	if !t.finished {
		t.finished = true
		close(t.done)
	}
}

// printf prints a line of the story; consumers print concurrently.
func (t *tally) printf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, format, args...)
}

func (t *tally) note(format string, args ...any) { t.printf("  ! "+format+"\n", args...) }

// report prints the summary, and an error if a message is missing.
func (t *tally) report() (*Report, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := &Report{Acked: map[string]int{}, Worker: t.worker}
	missing := 0
	fmt.Fprintln(t.out, "\nsummary:")
	for _, s := range services {
		r.Acked[s.group] = len(t.got[s.group])
		missing += len(t.want[s.group])
		fmt.Fprintf(t.out, "  %-9s got %d of %d orders\n", s.group, len(t.got[s.group]), len(orders))
	}
	r.Acked["resizers"] = len(t.got["resizers"])
	missing += len(t.want["resizers"])
	var split []string
	for w := 1; w <= workers; w++ {
		name := fmt.Sprintf("worker-%d", w)
		split = append(split, fmt.Sprintf("%s %d", name, t.worker[name]))
	}
	fmt.Fprintf(t.out, "  resizers  did %d of %d jobs (%s)\n", len(t.got["resizers"]), resizeJobs, strings.Join(split, ", "))
	for _, g := range []string{"payments", "duplicates", "poison"} {
		r.Acked[g] = len(t.got[g])
		missing += len(t.want[g])
	}
	fmt.Fprintf(t.out, "  payments  charged %d of %d cards; %d duplicate command(s) ignored\n", len(t.got["payments"]), len(orders), len(t.got["duplicates"]))
	fmt.Fprintf(t.out, "  ops       saw the malformed order poisoned by %d of %d services\n", len(t.got["poison"]), len(services))

	if missing > 0 {
		return r, fmt.Errorf("%d message(s) were not received and acked in time", missing)
	}
	fmt.Fprintln(t.out, "\nevery message was received and acked.")
	return r, nil
}
