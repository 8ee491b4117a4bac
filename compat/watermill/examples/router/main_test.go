package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The router example, unchanged, on mem://, redis:// and amqp://: every
// word comes out upper-cased exactly once, the ones that failed once
// included (Retry), each with a correlation ID.
func TestRouterExample(t *testing.T) {
	for name, broker := range map[string]func(t testing.TB) string{
		"memory": func(testing.TB) string { return "mem://router-test" },
		"redis":  testenv.Redis,
		"amqp":   testenv.AMQP,
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out bytes.Buffer
			const n = 12
			url, suffix := broker(t), relay.NewID()[24:]
			defer cleanup(t, url, "words-router-"+suffix, "shouted-router-"+suffix)
			if err := run(ctx, url, "router-"+suffix, n, &out, io.Discard); err != nil {
				t.Fatal(err)
			}
			var words []string
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				w, corr, ok := strings.Cut(line, " (correlation ")
				if !ok || len(corr) != 9 {
					t.Errorf("line %q has no correlation ID", line)
				}
				words = append(words, w)
			}
			sort.Strings(words)
			var want []string
			for i := 0; i < n; i++ {
				want = append(want, fmt.Sprintf("WORD-%02d", i))
			}
			if strings.Join(words, ",") != strings.Join(want, ",") {
				t.Errorf("printed %v, want %v", words, want)
			}
		})
	}
}

// cleanup deletes the example's topics from a shared broker: the streams
// on Redis, the exchanges and the group's queues on RabbitMQ.
func cleanup(t *testing.T, raw string, topics ...string) {
	ctx := context.Background()
	switch {
	case strings.HasPrefix(raw, "redis://"):
		opts, err := redis.ParseURL(raw)
		if err != nil {
			t.Fatal(err)
		}
		rc := redis.NewClient(opts)
		defer rc.Close()
		if err := rc.Del(ctx, topics...).Err(); err != nil {
			t.Errorf("deleting the example's streams: %v", err)
		}
	case strings.HasPrefix(raw, "amqp://"):
		conn, err := amqp091.Dial(raw)
		if err != nil {
			t.Fatalf("deleting the example's queues: %v", err)
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatalf("deleting the example's queues: %v", err)
		}
		for _, topic := range topics {
			if _, err := ch.QueueDelete(topic+".router-example", false, false, false); err != nil {
				t.Errorf("deleting queue %s: %v", topic, err)
			}
			if err := ch.ExchangeDelete(topic, false, false); err != nil {
				t.Errorf("deleting exchange %s: %v", topic, err)
			}
		}
	}
}

// -broker takes its default from $BROKER, as in every example.
func TestURLFlags(t *testing.T) {
	testenv.CheckEnvFlag(t, "broker", "mem://router-example", brokerFlag)
}
