package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCheckoutOnMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := run(ctx, &out, "mem://checkout-test-"+relay.NewID())
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
	// each service, Dedup charged the duplicated command once.
	for g, want := range map[string]int{"payments": len(orders), "duplicates": 1, "poison": len(services)} {
		if got := rep.Acked[g]; got != want {
			t.Errorf("%s: %d, want %d", g, got, want)
		}
	}
	for _, want := range []string{
		"email     <- send confirmation of A-1002 to bo@example.com",
		"! email: email provider timed out; trying again in",
		"order A-1004 poisoned by email: malformed order: unexpected end of JSON input",
		"payments  <- duplicate of charge 12.50 for A-1002 ignored: already charged",
		"analytics got 3 of 3 orders",
		"resizers  did 9 of 9 jobs",
		"payments  charged 3 of 3 cards; 1 duplicate command(s) ignored",
		"every message was received and acked.",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestCheckoutUnknownScheme(t *testing.T) {
	var out bytes.Buffer
	_, err := run(context.Background(), &out, "nope://checkout")
	if !errors.Is(err, relay.ErrUnknownScheme) {
		t.Fatalf("run on nope:// = %v, want ErrUnknownScheme", err)
	}
}

func TestCheckoutBadSubscriberURL(t *testing.T) {
	// group= is added by the program; a second one in the broker URL is an
	// error from the adapter, and the program returns it without hanging.
	var out bytes.Buffer
	_, err := run(context.Background(), &out, "mem://checkout-bad?group=x")
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
