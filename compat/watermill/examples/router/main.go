// Command router runs a Watermill router, written against Watermill's API
// only, on a relay backend: Watermill's router, its Retry, Recoverer and
// CorrelationID middleware and a handler that publishes, over whatever
// relay URL -broker names.
//
//	go run ./examples/router                                   # mem://
//	go run ./examples/router -broker redis://127.0.0.1:6379/0
//	BROKER=amqp://guest:guest@127.0.0.1:5672/ go run ./examples/router
//
// -broker wins over $BROKER; the default is mem://router-example.
//
// It publishes -n words to "words"; the "shout" handler upper-cases each
// into "shouted" (failing once on every fifth word, so that Retry is
// seen at work); the "print" handler prints them. It exits once every
// word was printed, or fails after -timeout.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/go-relay/relay"
	_ "github.com/go-relay/relay/adapters/amqp"
	_ "github.com/go-relay/relay/adapters/kafka"
	_ "github.com/go-relay/relay/adapters/memory"
	_ "github.com/go-relay/relay/adapters/nats"
	_ "github.com/go-relay/relay/adapters/postgres"
	_ "github.com/go-relay/relay/adapters/redisstream"
	_ "github.com/go-relay/relay/adapters/sqs"
	relaywm "github.com/go-relay/relay/compat/watermill"
)

func main() {
	n := flag.Int("n", 20, "how many words to publish")
	timeout := flag.Duration("timeout", time.Minute, "give up after this long")
	brokerURL := brokerFlag(flag.CommandLine)
	flag.Parse()
	broker := *brokerURL
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, broker, "router-"+relay.NewID()[24:], *n, os.Stdout, os.Stderr); err != nil {
		log.Fatal(err)
	}
}

// brokerFlag defines -broker on fs.
func brokerFlag(fs *flag.FlagSet) *string {
	return envFlag(fs, "broker", "mem://router-example", "relay URL of the backend")
}

// envFlag defines the string flag -name on fs, whose default is $NAME, else def.
func envFlag(fs *flag.FlagSet, name, def, usage string) *string {
	v := os.Getenv(strings.ToUpper(name))
	if v == "" {
		v = def
	}
	return fs.String(name, v, fmt.Sprintf("%s (default $%s, else %s)", usage, strings.ToUpper(name), def))
}

// run publishes n words to a fresh pair of topics (suffix makes them
// unique) of the relay backend at broker and runs the router until all n
// were printed to out; the router logs warnings and errors to logs.
func run(ctx context.Context, broker, suffix string, n int, out, logs io.Writer) error {
	pub, sub, err := open(ctx, broker)
	if err != nil {
		return err
	}
	words, shouted := "words-"+suffix, "shouted-"+suffix
	// Create the topics and the group first, so that nothing published
	// is dropped on backends that keep messages only for existing groups.
	for _, topic := range []string{words, shouted} {
		if err := sub.SubscribeInitialize(topic); err != nil {
			return err
		}
	}

	logger := watermill.NewSlogLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	if err != nil {
		return err
	}
	router.AddMiddleware(
		middleware.CorrelationID,
		middleware.Retry{MaxRetries: 3, InitialInterval: 10 * time.Millisecond, Logger: logger}.Middleware,
		middleware.Recoverer,
	)

	var mu sync.Mutex
	failedOnce := map[string]bool{}
	router.AddHandler("shout", words, sub, shouted, pub, func(msg *message.Message) ([]*message.Message, error) {
		w := string(msg.Payload)
		mu.Lock()
		fail := strings.HasSuffix(w, "0") || strings.HasSuffix(w, "5")
		fail = fail && !failedOnce[w]
		failedOnce[w] = true
		mu.Unlock()
		if fail {
			return nil, fmt.Errorf("transient failure on %q", w)
		}
		return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte(strings.ToUpper(w)))}, nil
	})

	printed := make(chan string, n)
	router.AddConsumerHandler("print", shouted, sub, func(msg *message.Message) error {
		printed <- string(msg.Payload) + " (correlation " + middleware.MessageCorrelationID(msg)[:8] + ")"
		return nil
	})

	routerDone := make(chan error, 1)
	go func() { routerDone <- router.Run(ctx) }()
	<-router.Running()

	for i := 0; i < n; i++ {
		m := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf("word-%02d", i)))
		middleware.SetCorrelationID(m.UUID, m)
		if err := pub.Publish(words, m); err != nil {
			_ = router.Close()
			return err
		}
	}
	seen := 0
	for seen < n {
		select {
		case line := <-printed:
			fmt.Fprintln(out, line)
			seen++
		case <-ctx.Done():
			_ = router.Close()
			return fmt.Errorf("printed %d of %d words: %w", seen, n, ctx.Err())
		}
	}
	if err := router.Close(); err != nil {
		return err
	}
	if err := <-routerDone; err != nil {
		return err
	}
	// The router closes the subscriber and the publisher it was given.
	return nil
}

// open opens broker as a relay publisher and a relay subscriber of group
// "router-example", each wrapped as its Watermill counterpart.
func open(ctx context.Context, broker string) (*relaywm.Publisher, *relaywm.Subscriber, error) {
	u, err := url.Parse(broker)
	if err != nil {
		return nil, nil, fmt.Errorf("-broker: %w", err)
	}
	q := u.Query()
	if q.Get("group") == "" && u.Scheme != "sqs" {
		q.Set("group", "router-example")
	}
	u.RawQuery = q.Encode()
	p, err := relay.OpenPublisher(ctx, broker)
	if err != nil {
		return nil, nil, err
	}
	s, err := relay.OpenSubscriber(ctx, u.String())
	if err != nil {
		_ = p.Close()
		return nil, nil, err
	}
	return relaywm.NewPublisher(p, relaywm.Options{}), relaywm.NewSubscriber(s, relaywm.Options{}), nil
}
