package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRequestReplyOnMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := run(ctx, &out, "mem://requestreply-test-"+relay.NewID())
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for item, cents := range prices {
		if rep.Quotes[item] != cents {
			t.Errorf("quote of %s: %d, want %d", item, rep.Quotes[item], cents)
		}
	}
	if got := rep.RemoteErrors[unknownItem]; got != `we do not sell "caviar"` {
		t.Errorf("remote error for %s: %q", unknownItem, got)
	}
	n := uint64(len(prices) + 1)
	if st := rep.Stats; st.Sent != n || st.Answered != n || st.RemoteErrors != 1 || st.Late != 0 || st.TimedOut != 0 {
		t.Errorf("stats %+v", st)
	}
	if !strings.HasPrefix(rep.ReplyTopic, "relay-reply-") {
		t.Errorf("reply topic %q", rep.ReplyTopic)
	}
	for _, want := range []string{"espresso    2.50", `caviar      error from the service: we do not sell "caviar"`, "8 requests, 8 answered (1 with an error)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestRequestReplyOnBrokers runs the example on the shared brokers and on
// an in-process Kafka (kfake).
func TestRequestReplyOnBrokers(t *testing.T) {
	brokers := map[string]func(t *testing.T) string{
		"redis":    func(t *testing.T) string { return testenv.Redis(t) },
		"amqp":     func(t *testing.T) string { return testenv.AMQP(t) },
		"nats":     func(t *testing.T) string { return testenv.NATS(t) },
		"postgres": func(t *testing.T) string { return testenv.Postgres(t) },
		"kafka": func(t *testing.T) string {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			return "kafka://" + c.ListenAddrs()[0]
		},
	}
	for name, url := range brokers {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out bytes.Buffer
			rep, err := run(ctx, &out, url(t))
			if err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			if direct := rep.ReplyTopic == ""; direct != (name == "amqp") {
				t.Errorf("reply topic %q on %s", rep.ReplyTopic, name)
			}
		})
	}
}

// -broker take their default from the environment, as in every example.
func TestURLFlags(t *testing.T) {
	testenv.CheckEnvFlag(t, "broker", "mem://requestreply", brokerFlag)
}
