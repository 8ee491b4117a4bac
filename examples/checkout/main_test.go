package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	relaynats "github.com/go-relay/relay/adapters/nats"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

func TestMain(m *testing.M) {
	if args := os.Getenv(argsEnv); args != "" {
		os.Args = append(os.Args[:1], strings.Split(args, "\n")...)
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func TestCheckoutOnMemory(t *testing.T) {
	checkRun(t, "mem://checkout-test-"+relay.NewID(), false, nil)
}

// TestCheckoutOnNATS runs the demo on the NATS JetStream server of the
// tests. JetStream stores the charge command published twice with one ID
// once, so payments sees no duplicate there; each service's poison copy
// of the malformed order has an ID of its own, so all three reach the
// shared poison topic.
func TestCheckoutOnNATS(t *testing.T) {
	url := testenv.NATS(t)
	checkRun(t, url, true, func(rep *Report) {
		// The run's streams stay on the shared server unless deleted.
		nc, err := natsgo.Connect(url)
		if err != nil {
			t.Error(err)
			return
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Error(err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, topic := range rep.Topics {
			if err := js.DeleteStream(ctx, relaynats.StreamName(topic)); err != nil {
				t.Errorf("deleting the stream of %s: %v", topic, err)
			}
		}
	})
}

// checkRun runs the demo on broker and checks its report and output;
// brokerDedups says whether the broker stores a message published twice
// with one ID once. cleanup, if not nil, gets the report at the end of
// the test, also when a check failed.
func checkRun(t *testing.T, broker string, brokerDedups bool, cleanup func(*Report)) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := run(ctx, &out, broker, Options{})
	if rep != nil && cleanup != nil {
		t.Cleanup(func() { cleanup(rep) })
	}
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, s := range services {
		if got := rep.Acked[s.group]; got != len(orders) {
			t.Errorf("group %s acked %d orders, want %d", s.group, got, len(orders))
		}
	}
	if got := rep.Acked["resizers"]; got != resizeJobs {
		t.Errorf("resizers acked %d jobs, want %d", got, resizeJobs)
	}
	total := 0
	for w, n := range rep.Worker {
		if !strings.HasPrefix(w, "worker-") {
			t.Errorf("unexpected worker %q", w)
		}
		total += n
	}
	if total != resizeJobs {
		t.Errorf("workers did %d jobs in all, want %d (each job once)", total, resizeJobs)
	}
	// Retry recovered the email, PoisonQueue took the malformed order from
	// each service, Dedup (or the broker) charged the duplicated command
	// once.
	dups := 1
	wantOut := []string{
		"email     <- send confirmation of A-1002 to bo@example.com",
		"! email: email provider timed out; trying again in",
		"order A-1004 poisoned by inventory: malformed order: unexpected end of JSON input",
		"order A-1004 poisoned by email: malformed order: unexpected end of JSON input",
		"order A-1004 poisoned by analytics: malformed order: unexpected end of JSON input",
		"ops       saw the malformed order poisoned by 3 of 3 services",
		"analytics got 3 of 3 orders",
		"resizers  did 9 of 9 jobs",
		"every message was received and acked.",
	}
	if brokerDedups {
		dups = 0
		wantOut = append(wantOut,
			"(this broker stores a message published twice with one ID once: payments gets it once)",
			"payments  charged 3 of 3 cards; 0 duplicate command(s) ignored")
	} else {
		wantOut = append(wantOut,
			"payments  <- duplicate of charge 12.50 for A-1002 ignored: already charged",
			"payments  charged 3 of 3 cards; 1 duplicate command(s) ignored")
	}
	for g, want := range map[string]int{"payments": len(orders), "duplicates": dups, "poison": len(services)} {
		if got := rep.Acked[g]; got != want {
			t.Errorf("%s: %d, want %d", g, got, want)
		}
	}
	for _, want := range wantOut {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Count(out.String(), "charge 12.50 for A-1002") != 1+dups {
		t.Errorf("the charge command for A-1002 was handled %d times, want once (plus %d duplicate):\n%s",
			strings.Count(out.String(), "charge 12.50 for A-1002"), dups, out.String())
	}
	return rep
}

func TestCheckoutUnknownScheme(t *testing.T) {
	var out bytes.Buffer
	_, err := run(context.Background(), &out, "nope://checkout", Options{})
	if !errors.Is(err, relay.ErrUnknownScheme) {
		t.Fatalf("run on nope:// = %v, want ErrUnknownScheme", err)
	}
}

func TestCheckoutBadSubscriberURL(t *testing.T) {
	// group= is added by the program; a second one in the broker URL is an
	// error from the adapter, and the program returns it without hanging.
	var out bytes.Buffer
	_, err := run(context.Background(), &out, "mem://checkout-bad?group=x", Options{})
	if !errors.Is(err, relay.ErrBadURL) {
		t.Fatalf("run with group in broker URL = %v, want ErrBadURL", err)
	}
}

func TestWithQuery(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"mem://checkout", "mem://checkout?group=g&inflight=1"},
		{"mem://checkout?", "mem://checkout?group=g&inflight=1"},
		{"sns://?region=eu-west-1", "sns://?region=eu-west-1&group=g&inflight=1"},
		{"redis://h:6379/0?pool=4&", "redis://h:6379/0?pool=4&group=g&inflight=1"},
	} {
		if got := withQuery(c.in, "group=g", "inflight=1"); got != c.want {
			t.Errorf("withQuery(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// -broker take their default from the environment, as in every example.
func TestURLFlags(t *testing.T) {
	testenv.CheckEnvFlag(t, "broker", "mem://checkout", brokerFlag)
}
