// Command reminders publishes reminders that are due later and has a
// router handle each one when it falls due, on any backend with delayed
// delivery (Message.DeliverAt).
//
// A "calendar" service publishes four reminders at once, each with its
// own delay; a "notifier" service subscribes in a router and sends each
// reminder when it arrives. The broker (or, on NATS, relay's subscription
// layer) holds every reminder until its DeliverAt: the program prints when
// each was due and when it was handled, and exits 0 once every reminder
// was handled, none early; 1 if one arrived early or something is missing
// when -timeout runs out, or if the backend has no delayed delivery (SNS,
// SQS FIFO queues), which refuses the publish.
//
//	go run ./examples/reminders                      # in-process backend
//	BROKER=postgres://postgres@127.0.0.1:5432/test go run ./examples/reminders
//	go run ./examples/reminders -broker amqp://guest:guest@127.0.0.1:5672/
//	go run ./examples/reminders -broker nats://127.0.0.1:4222
//	go run ./examples/reminders -broker 'sqs://?region=eu-west-1'
//
// -broker wins over $BROKER; the default is mem://reminders.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/router"

	_ "github.com/go-relay/relay/adapters/amqp"        // registers amqp://, amqps://
	_ "github.com/go-relay/relay/adapters/kafka"       // registers kafka://
	_ "github.com/go-relay/relay/adapters/memory"      // registers mem://
	_ "github.com/go-relay/relay/adapters/nats"        // registers nats://
	_ "github.com/go-relay/relay/adapters/postgres"    // registers postgres://, postgresql://
	_ "github.com/go-relay/relay/adapters/redisstream" // registers redis://, rediss://
	_ "github.com/go-relay/relay/adapters/sqs"         // registers sqs://, sns://
)

// reminders are what the calendar publishes: text and delay. Published
// together, they are due in another order than they were published.
var reminders = []struct {
	text  string
	delay time.Duration
}{
	{"stand-up in the blue room", 2 * time.Second},
	{"water the plants", 500 * time.Millisecond},
	{"call the dentist back", 3 * time.Second},
	{"the oven timer", 1200 * time.Millisecond},
}

// dueKey is the metadata the calendar writes the due time into, so that
// the notifier can tell how late (or early) a reminder arrived.
const dueKey = "reminder-due"

func main() {
	broker := brokerFlag(flag.CommandLine)
	timeout := flag.Duration("timeout", 30*time.Second, "give up if not every reminder was handled by then")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if _, err := run(ctx, os.Stdout, *broker); err != nil {
		fmt.Fprintln(os.Stderr, "reminders:", err)
		os.Exit(1)
	}
}

// brokerFlag defines -broker on fs.
func brokerFlag(fs *flag.FlagSet) *string {
	return envFlag(fs, "broker", "mem://reminders", "broker URL; the subscriber adds group=notifier")
}

// envFlag defines the string flag -name on fs, whose default is $NAME, else def.
func envFlag(fs *flag.FlagSet, name, def, usage string) *string {
	v := os.Getenv(strings.ToUpper(name))
	if v == "" {
		v = def
	}
	return fs.String(name, v, fmt.Sprintf("%s (default $%s, else %s)", usage, strings.ToUpper(name), def))
}

// Handled is one reminder as the notifier handled it.
type Handled struct {
	ID, Text string
	Due, At  time.Time
}

// Report is what a run handled, in the order handled, and its topic.
type Report struct {
	Handled []Handled
	Topic   string
}

// run publishes the reminders on broker and returns once each was handled,
// with an error when one came early, when the backend refused them, or
// when ctx ends first.
func run(ctx context.Context, out io.Writer, broker string) (*Report, error) {
	out = &syncWriter{w: out} // the handler prints while run does
	id := relay.NewID()
	rep := &Report{Topic: "reminders-" + id[len(id)-8:]} // fresh topic per run
	fmt.Fprintf(out, "reminders on %s (topic %s)\n", relay.Redact(broker), rep.Topic)

	pub, err := relay.OpenPublisher(ctx, broker)
	if err != nil {
		return nil, err
	}
	defer pub.Close()
	if cr, ok := pub.(relay.CapabilityReporter); ok {
		c := cr.Capabilities()
		fmt.Fprintf(out, "%s: delayed delivery %s", c.Backend, orNone(string(c.DelayedDelivery)))
		if c.MaxDeliverDelay > 0 {
			fmt.Fprintf(out, ", up to %v ahead", c.MaxDeliverDelay)
		}
		fmt.Fprintln(out)
	}

	sub, err := relay.OpenSubscriber(ctx, withQuery(broker, "group=notifier"))
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	// On a durable broker, Provision creates the group now, so that the
	// reminders published below are kept for it.
	if p, ok := sub.(relay.Provisioner); ok {
		if err := p.Provision(ctx, rep.Topic); err != nil && !errors.Is(err, relay.ErrNotSupported) {
			return nil, fmt.Errorf("provision %s: %w", rep.Topic, err)
		}
	}

	var mu sync.Mutex
	done := make(chan struct{})
	var early []string
	r, err := router.New(router.Config{CloseTimeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	err = r.AddHandler("notifier", sub, rep.Topic, func(_ context.Context, m *relay.Message) ([]*relay.Message, error) {
		at := time.Now()
		due, err := time.Parse(time.RFC3339Nano, m.Metadata.Get(dueKey))
		if err != nil {
			return nil, relay.Permanent(fmt.Errorf("reminder %s without a due time: %w", m.ID, err))
		}
		mu.Lock()
		defer mu.Unlock()
		for _, h := range rep.Handled {
			if h.ID == m.ID {
				return nil, nil // a redelivery (at-least-once): sent already
			}
		}
		note := fmt.Sprintf("%v late", at.Sub(due).Round(time.Millisecond))
		if at.Before(due) {
			note = fmt.Sprintf("%v EARLY", due.Sub(at).Round(time.Millisecond))
			early = append(early, m.ID)
		}
		fmt.Fprintf(out, "  %s  reminder: %-28q (due %s, %s)\n", at.Format("15:04:05.000"), m.Payload, due.Format("15:04:05.000"), note)
		rep.Handled = append(rep.Handled, Handled{ID: m.ID, Text: string(m.Payload), Due: due, At: at})
		if len(rep.Handled) == len(reminders) {
			close(done)
		}
		return nil, nil // the router acks it
	})
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

	now := time.Now()
	var msgs []*relay.Message
	for _, rm := range reminders {
		m := relay.NewMessage([]byte(rm.text)).DeliverAfter(rm.delay)
		m.Metadata = relay.Metadata{dueKey: m.DeliverAt.Format(time.RFC3339Nano)}
		msgs = append(msgs, m)
	}
	if err := pub.Publish(ctx, rep.Topic, msgs...); err != nil {
		if errors.Is(err, relay.ErrDelayUnsupported) {
			return nil, fmt.Errorf("this backend has no delayed delivery, so it refused the reminders (nothing was sent): %w", err)
		}
		return nil, err
	}
	fmt.Fprintf(out, "  %s  published %d reminders, due in %v\n", now.Format("15:04:05.000"), len(msgs), delays())

	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		n := len(rep.Handled)
		mu.Unlock()
		return rep, fmt.Errorf("%d of %d reminders handled: %w", n, len(reminders), ctx.Err())
	case err := <-errc:
		return rep, fmt.Errorf("router stopped: %v", err)
	}
	if err := r.Close(); err != nil {
		return rep, err
	}
	mu.Lock()
	defer mu.Unlock()
	if len(early) > 0 {
		return rep, fmt.Errorf("%d reminders arrived before they were due: %v", len(early), early)
	}
	fmt.Fprintf(out, "all %d reminders handled when due, none early\n", len(reminders))
	return rep, nil
}

func delays() []time.Duration {
	var out []time.Duration
	for _, rm := range reminders {
		out = append(out, rm.delay)
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// syncWriter serializes writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// withQuery appends params to a URL's query.
func withQuery(rawURL string, params ...string) string {
	switch {
	case !strings.Contains(rawURL, "?"):
		rawURL += "?"
	case !strings.HasSuffix(rawURL, "?") && !strings.HasSuffix(rawURL, "&"):
		rawURL += "&"
	}
	return rawURL + strings.Join(params, "&")
}
