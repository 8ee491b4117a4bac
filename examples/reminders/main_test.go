package main

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRemindersOnMemory: every reminder is handled once, none before its
// due time, in due order (mem:// orders per topic), with its text.
func TestRemindersOnMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	rep, err := run(ctx, &out, "mem://reminders-test-"+relay.NewID())
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if len(rep.Handled) != len(reminders) {
		t.Fatalf("%d reminders handled, want %d", len(rep.Handled), len(reminders))
	}
	byDelay := slices.Clone(reminders)
	slices.SortFunc(byDelay, func(a, b struct {
		text  string
		delay time.Duration
	}) int {
		return int(a.delay - b.delay)
	})
	for i, h := range rep.Handled {
		if h.At.Before(h.Due) {
			t.Errorf("%q handled %v before it was due", h.Text, h.Due.Sub(h.At))
		}
		if h.Text != byDelay[i].text {
			t.Errorf("reminder %d handled: %q, want %q (due order)", i, h.Text, byDelay[i].text)
		}
	}
	if !strings.Contains(out.String(), "none early") {
		t.Errorf("output does not report success:\n%s", out.String())
	}
}

// TestRemindersTimeout: a run whose ctx ends before the first reminder is
// due fails with the ctx's error and has handled nothing: the reminders
// were not delivered early to make the deadline.
func TestRemindersTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var out bytes.Buffer
	rep, err := run(ctx, &out, "mem://reminders-test-"+relay.NewID())
	if !errors.Is(err, context.DeadlineExceeded) || rep == nil || len(rep.Handled) != 0 {
		t.Fatalf("run with 200ms for reminders due in 500ms and later: %v, report %+v", err, rep)
	}
}

// -broker take their default from the environment, as in every example.
func TestURLFlags(t *testing.T) {
	testenv.CheckEnvFlag(t, "broker", "mem://reminders", brokerFlag)
}
