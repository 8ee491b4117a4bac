// Command checkout is relay's demo, and the first relay code to read.
//
// An order service publishes "order placed" events. Three services —
// inventory, email and analytics — each subscribe in their own group, so
// each gets its own copy of every order (publish/subscribe). Meanwhile a
// catalog publishes image-resize jobs to a work queue that three workers
// share in one group, so each job goes to one of them (competing consumers).
//
// The program prints who got what, and exits 0 once every message was
// received and acked by everyone who should get it; it exits 1 if something
// is missing when -timeout runs out.
//
//	go run ./examples/checkout                          # in-process backend
//	go run ./examples/checkout -broker redis://127.0.0.1:6379/0
//	go run ./examples/checkout -broker amqp://guest:guest@127.0.0.1:5672/
//
// The same code runs on any backend: only the URL changes.
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
	_ "github.com/go-relay/relay/adapters/amqp"        // registers amqp://, amqps://
	_ "github.com/go-relay/relay/adapters/kafka"       // registers kafka://
	_ "github.com/go-relay/relay/adapters/memory"      // registers mem://
	_ "github.com/go-relay/relay/adapters/redisstream" // registers redis://, rediss://
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
	broker := flag.String("broker", "mem://checkout", "broker URL; subscribers add group=NAME to it")
	timeout := flag.Duration("timeout", 30*time.Second, "give up if not everything arrived by then")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if _, err := run(ctx, os.Stdout, *broker); err != nil {
		fmt.Fprintln(os.Stderr, "checkout:", err)
		os.Exit(1)
	}
}

// Report is what the run received: acked message IDs per group, and how
// many jobs each worker did.
type Report struct {
	Acked  map[string]int // group -> distinct messages acked
	Worker map[string]int // worker -> jobs acked
}

// run plays the story on broker and returns once every message was acked,
// or with an error when ctx ends first.
func run(ctx context.Context, out io.Writer, broker string) (*Report, error) {
	id := relay.NewID()
	runID := id[len(id)-8:] // fresh topics per run, so a durable broker's old messages don't count
	orderTopic := "order-placed-" + runID
	jobTopic := "image-resize-" + runID
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
	shutdown := func() {
		for _, s := range subs {
			s.Close() // ends its subscriptions and closes their channels
		}
		wg.Wait()
	}
	defer shutdown()
	subscribe := func(group, topic string, params ...string) (<-chan *relay.Message, error) {
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
		return sub.Subscribe(ctx, topic)
	}

	for _, s := range services {
		msgs, err := subscribe(s.group, orderTopic)
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			for m := range msgs {
				var o Order
				if err := json.Unmarshal(m.Payload, &o); err != nil {
					t.note("%s: bad order %s: %v", s.group, m.ID, err)
					continue
				}
				t.ack(m, s.group, s.group, s.act(o))
			}
		})
	}
	for w := 1; w <= workers; w++ {
		name := fmt.Sprintf("worker-%d", w)
		jobs, err := subscribe("resizers", jobTopic, "inflight=1")
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			for m := range jobs {
				time.Sleep(20 * time.Millisecond) // "resizing"
				t.ack(m, "resizers", name, "resized "+string(m.Payload))
			}
		})
	}

	// The order service places its orders, and the catalog queues photos to
	// resize. Each Publish sends its batch in one go and returns once the
	// broker has accepted every message.
	var placed, queued []*relay.Message
	for _, o := range orders {
		body, _ := json.Marshal(o)
		m := relay.NewMessage(body)
		m.Key = o.ID // ordering key: one order's events stay in order
		m.Metadata = relay.Metadata{"event": "order.placed"}
		placed = append(placed, m)
		for _, s := range services {
			t.expect(s.group, m.ID)
		}
	}
	for i := 1; i <= resizeJobs; i++ {
		m := relay.NewMessage(fmt.Appendf(nil, "photo-%02d.jpg", i))
		queued = append(queued, m)
		t.expect("resizers", m.ID)
	}
	t.printf("order service: placing %d orders on %s\n", len(placed), orderTopic)
	if err := pub.Publish(ctx, orderTopic, placed...); err != nil {
		return nil, fmt.Errorf("publish orders: %w", err)
	}
	t.printf("catalog:       queueing %d resize jobs on %s\n", len(queued), jobTopic)
	if err := pub.Publish(ctx, jobTopic, queued...); err != nil {
		return nil, fmt.Errorf("publish jobs: %w", err)
	}

	select {
	case <-t.done:
	case <-ctx.Done():
	}
	shutdown()
	return t.report()
}

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

// ack acks m and records it for group; who did it and what it did is
// printed. A message whose Ack fails is not counted: the broker redelivers it.
func (t *tally) ack(m *relay.Message, group, who, what string) {
	if err := m.Ack(); err != nil {
		t.note("%s: ack %s: %v", who, m.ID, err)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	again := ""
	if m.Attempt() > 1 {
		again = fmt.Sprintf(" (attempt %d)", m.Attempt())
	}
	fmt.Fprintf(t.out, "  %-9s <- %s%s\n", who, what, again)
	if t.want[group][m.ID] {
		delete(t.want[group], m.ID)
		t.got[group][m.ID] = true
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

	if missing > 0 {
		return r, fmt.Errorf("%d message(s) were not received and acked in time", missing)
	}
	fmt.Fprintln(t.out, "\nevery message was received and acked.")
	return r, nil
}
