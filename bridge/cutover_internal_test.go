package bridge

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// syncBuf is a log sink safe for concurrent writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A route is not caught up while the destination holds its messages
// unconfirmed, becomes caught up once they are confirmed and the source
// stayed empty for caught_up_after, and with stop_when: drained stops
// there: Run returns nil by itself, the state is drained and the last log
// line of the route has its counts.
func TestCaughtUpThenDrained(t *testing.T) {
	src := "mem://cut-" + relay.NewID()
	var logs syncBuf
	b, err := New(Config{Routes: []Route{{
		Name:          "r",
		From:          Source{URL: src, Topic: "t", Group: "g"},
		To:            Destination{URL: holdScheme + "://x"},
		CaughtUpAfter: 200 * time.Millisecond,
		StopWhen:      StopWhenDrained,
	}}}, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	b.routes[0].pollInterval = 10 * time.Millisecond
	pub, err := relay.OpenPublisher(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	const n = 7
	for i := range n {
		if err := pub.Publish(context.Background(), "t", relay.NewMessage([]byte{byte(i)})); err != nil {
			t.Fatal(err)
		}
	}
	release := make(chan struct{})
	hold.Lock()
	hold.release = release
	hold.Unlock()
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { done <- b.Run(ctx) }()

	// Held by the destination for several quiet periods: never caught up.
	deadline := time.Now().Add(30 * time.Second)
	for b.Status().Routes[0].InFlight != n {
		if time.Now().After(deadline) {
			t.Fatalf("in flight %d, want %d", b.Status().Routes[0].InFlight, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(600 * time.Millisecond)
	if rs := b.Status().Routes[0]; rs.State != StateRunning || rs.CaughtUpSince != nil {
		t.Fatalf("state %s (caught up since %v) while %d messages are unconfirmed", rs.State, rs.CaughtUpSince, rs.InFlight)
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v after the source drained", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the route did not stop by itself; state %s", b.Status().Routes[0].State)
	}
	rs := b.Status().Routes[0]
	if rs.State != StateDrained || rs.Forwarded != n || rs.SourceLag == nil || *rs.SourceLag != 0 {
		t.Fatalf("after stop_when: state %s, forwarded %d, lag %v", rs.State, rs.Forwarded, rs.SourceLag)
	}
	out := logs.String()
	for _, want := range []string{"route caught up", "route drained its source", "msg=\"route drained\""} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "msg=\"route drained\"") && !strings.Contains(line, "forwarded=7 failed=0 poisoned=0 duplicates=0") {
			t.Errorf("drain line without the counts: %s", line)
		}
	}
	if b.Ready() != nil {
		t.Errorf("a drained route is not ready: %v", b.Ready())
	}
}

// rejectScheme is a destination that refuses every message for good.
const rejectScheme = "relaytest-reject"

func init() { relay.Register(rejectScheme, rejectOpener{}) }

type rejectOpener struct{}

func (rejectOpener) OpenPublisher(context.Context, *url.URL) (relay.Publisher, error) {
	return rejectPublisher{}, nil
}

func (rejectOpener) OpenSubscriber(context.Context, *url.URL) (relay.Subscriber, error) {
	return nil, relay.ErrNotSupported
}

type rejectPublisher struct{}

func (rejectPublisher) Publish(context.Context, string, ...*relay.Message) error {
	return &relay.LimitError{What: "payload", Limit: 0, Actual: 1}
}

func (rejectPublisher) Close() error { return nil }

// A route that drains its source but poisoned messages on the way makes
// Run return an *IncompleteError naming the count.
func TestDrainedWithPoisonedIsIncomplete(t *testing.T) {
	src := "mem://poi-" + relay.NewID()
	b, err := New(Config{Routes: []Route{{
		Name:          "r",
		From:          Source{URL: src, Topic: "t", Group: "g"},
		To:            Destination{URL: rejectScheme + "://x"},
		Poison:        &Poison{URL: src, Topic: "poison"},
		CaughtUpAfter: 100 * time.Millisecond,
		StopWhen:      StopWhenDrained,
	}}}, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	b.routes[0].pollInterval = 10 * time.Millisecond
	pub, err := relay.OpenPublisher(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Publish(context.Background(), "t", relay.NewMessage([]byte("a")), relay.NewMessage([]byte("b"))); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = b.Run(ctx)
	var ie *IncompleteError
	if !errors.As(err, &ie) || ie.Poisoned != 2 || ie.Route != "r" {
		t.Fatalf("Run = %v, want an *IncompleteError with 2 poisoned", err)
	}
}
