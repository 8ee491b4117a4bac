// Command requestreply is request/reply over relay: a pricing service
// answers quote requests, and a shop asks it for several quotes at once.
//
// The service runs a router whose handler (reqreply.Handler) looks an item
// up and returns its price; the router acks the request once the reply is
// published to the requester. The shop's reqreply.Requester sends every
// request concurrently and matches the replies by correlation ID. One item
// is unknown: the service's error comes back as a *reqreply.RemoteError.
// On amqp:// the replies use RabbitMQ's direct reply-to; elsewhere the
// requester creates a reply topic of its own and removes it on Close.
//
// The program exits 0 when every quote was answered as expected.
//
//	go run ./examples/requestreply
//	BROKER=redis://127.0.0.1:6379/0 go run ./examples/requestreply
//	go run ./examples/requestreply -broker amqp://guest:guest@127.0.0.1:5672/
//
// -broker wins over $BROKER; the default is mem://requestreply.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/reqreply"
	"github.com/go-relay/relay/router"

	_ "github.com/go-relay/relay/adapters/amqp"        // registers amqp://, amqps://
	_ "github.com/go-relay/relay/adapters/kafka"       // registers kafka://
	_ "github.com/go-relay/relay/adapters/memory"      // registers mem://
	_ "github.com/go-relay/relay/adapters/nats"        // registers nats://
	_ "github.com/go-relay/relay/adapters/postgres"    // registers postgres://
	_ "github.com/go-relay/relay/adapters/redisstream" // registers redis://, rediss://
	_ "github.com/go-relay/relay/adapters/sqs"         // registers sqs://, sns://
)

func main() {
	broker := brokerFlag(flag.CommandLine)
	timeout := flag.Duration("timeout", 30*time.Second, "give up if not every quote is answered by then")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if _, err := run(ctx, os.Stdout, *broker); err != nil {
		fmt.Fprintln(os.Stderr, "requestreply:", err)
		os.Exit(1)
	}
}

// brokerFlag defines -broker on fs.
func brokerFlag(fs *flag.FlagSet) *string {
	return envFlag(fs, "broker", "mem://requestreply", "broker URL; subscribers add group=NAME to it")
}

// envFlag defines the string flag -name on fs, whose default is $NAME, else def.
func envFlag(fs *flag.FlagSet, name, def, usage string) *string {
	v := os.Getenv(strings.ToUpper(name))
	if v == "" {
		v = def
	}
	return fs.String(name, v, fmt.Sprintf("%s (default $%s, else %s)", usage, strings.ToUpper(name), def))
}

// prices is the pricing service's catalogue, in cents.
var prices = map[string]int{
	"espresso": 250, "cappuccino": 350, "croissant": 220, "bagel": 300,
	"muffin": 280, "tea": 200, "scone": 260,
}

// unknownItem is the item the shop asks for that the service does not sell.
const unknownItem = "caviar"

// Report is what a run got back.
type Report struct {
	Quotes       map[string]int    // item -> price, from the replies
	RemoteErrors map[string]string // item -> the service's error text
	Stats        reqreply.Stats
	ReplyTopic   string // "" with a direct reply channel
}

// run starts the pricing service on broker, asks it for a quote of every
// item (and of unknownItem) at once, and returns what came back.
func run(ctx context.Context, out io.Writer, broker string) (*Report, error) {
	id := relay.NewID()
	topic := "price-quotes-" + id[len(id)-8:] // fresh per run
	fmt.Fprintf(out, "request/reply on %s, service topic %s\n\n", relay.Redact(broker), topic)

	pub, err := relay.OpenPublisher(ctx, broker)
	if err != nil {
		return nil, err
	}
	defer pub.Close()

	// The service: a router handler that answers each request.
	srvSub, err := relay.OpenSubscriber(ctx, withGroup(broker, "pricing"))
	if err != nil {
		return nil, err
	}
	defer srvSub.Close()
	if p, ok := srvSub.(relay.Provisioner); ok {
		if err := p.Provision(ctx, topic); err != nil {
			return nil, err
		}
	}
	// The service topic is this run's only: remove it (queue, stream,
	// rows...) on the way out, once the router has stopped.
	if tr, ok := srvSub.(reqreply.TopicRemover); ok {
		defer func() {
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = tr.RemoveTopic(rctx, topic)
		}()
	}
	rt, err := router.New(router.Config{})
	if err != nil {
		return nil, err
	}
	quote := func(_ context.Context, req *relay.Message) (*relay.Message, error) {
		item := string(req.Payload)
		cents, ok := prices[item]
		if !ok {
			return nil, fmt.Errorf("we do not sell %q", item)
		}
		return relay.NewMessage([]byte(fmt.Sprint(cents))), nil
	}
	if err := rt.AddHandler("pricing", srvSub, topic, reqreply.Handler(pub, quote), router.WithConcurrency(4)); err != nil {
		return nil, err
	}
	rtDone := make(chan error, 1)
	go func() { rtDone <- rt.Run(context.Background()) }()
	defer func() { _ = rt.Close(); <-rtDone }()
	select {
	case <-rt.Running():
	case err := <-rtDone:
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}

	// The shop: one requester, every quote requested at once.
	shopSub, err := relay.OpenSubscriber(ctx, withGroup(broker, "shop"))
	if err != nil {
		return nil, err
	}
	defer shopSub.Close()
	req, err := reqreply.NewRequester(ctx, pub, shopSub)
	if err != nil {
		return nil, err
	}
	defer req.Close()
	rep := &Report{Quotes: map[string]int{}, RemoteErrors: map[string]string{}, ReplyTopic: req.ReplyTopic()}
	if rep.ReplyTopic == "" {
		fmt.Fprintln(out, "replies: the broker's direct reply channel")
	} else {
		fmt.Fprintf(out, "replies: reply topic %s (removed on Close)\n", rep.ReplyTopic)
	}

	items := []string{unknownItem}
	for item := range prices {
		items = append(items, item)
	}
	sort.Strings(items)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var failures []error
	for _, item := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reply, err := req.Request(ctx, topic, relay.NewMessage([]byte(item)))
			mu.Lock()
			defer mu.Unlock()
			var remote *reqreply.RemoteError
			switch {
			case errors.As(err, &remote):
				rep.RemoteErrors[item] = remote.Message
			case err != nil:
				failures = append(failures, fmt.Errorf("%s: %w", item, err))
			default:
				var cents int
				if _, err := fmt.Sscan(string(reply.Payload), &cents); err != nil {
					failures = append(failures, fmt.Errorf("%s: reply %q: %w", item, reply.Payload, err))
					return
				}
				rep.Quotes[item] = cents
			}
		}()
	}
	wg.Wait()
	for _, item := range items {
		if msg, ok := rep.RemoteErrors[item]; ok {
			fmt.Fprintf(out, "  %-10s  error from the service: %s\n", item, msg)
		} else if cents, ok := rep.Quotes[item]; ok {
			fmt.Fprintf(out, "  %-10s  %d.%02d\n", item, cents/100, cents%100)
		}
	}
	rep.Stats = req.Stats()
	fmt.Fprintf(out, "\n%d requests, %d answered (%d with an error), %d timed out, %d late replies\n",
		rep.Stats.Sent, rep.Stats.Answered, rep.Stats.RemoteErrors, rep.Stats.TimedOut, rep.Stats.Late)
	if len(failures) > 0 {
		return rep, errors.Join(failures...)
	}
	if len(rep.Quotes) != len(prices) || len(rep.RemoteErrors) != 1 {
		return rep, fmt.Errorf("%d quotes and %d errors, want %d and 1", len(rep.Quotes), len(rep.RemoteErrors), len(prices))
	}
	return rep, nil
}

// withGroup adds group=name to a broker URL, except on sqs://, where the
// queue itself is the group.
func withGroup(broker, name string) string {
	if u, err := url.Parse(broker); err == nil && u.Scheme == "sqs" {
		return broker
	}
	sep := "?"
	if strings.Contains(broker, "?") {
		sep = "&"
	}
	return broker + sep + "group=" + name
}
