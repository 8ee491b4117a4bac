package bridge

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
	_ "github.com/go-relay/relay/adapters/memory"
)

// holdScheme is a destination whose Publish blocks until the running test
// releases it (closes hold.release), so the source's messages stay unacked.
const holdScheme = "relaytest-hold"

var hold struct {
	sync.Mutex
	release chan struct{}
}

func init() { relay.Register(holdScheme, holdOpener{}) }

type holdOpener struct{}

func (holdOpener) OpenPublisher(context.Context, *url.URL) (relay.Publisher, error) {
	hold.Lock()
	defer hold.Unlock()
	return holdPublisher{release: hold.release}, nil
}

func (holdOpener) OpenSubscriber(context.Context, *url.URL) (relay.Subscriber, error) {
	return nil, relay.ErrNotSupported
}

type holdPublisher struct{ release <-chan struct{} }

func (p holdPublisher) Publish(ctx context.Context, _ string, _ ...*relay.Message) error {
	select {
	case <-p.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (holdPublisher) Close() error { return nil }

// The source lag gauge shows the messages of a mem:// source that the
// route's group has not acked, and falls to 0 once they are forwarded.
func TestSourceLagGauge(t *testing.T) {
	src := "mem://lag-" + relay.NewID()
	b, err := New(Config{Routes: []Route{{
		Name: "r",
		From: Source{URL: src, Topic: "t", Group: "g"},
		To:   Destination{URL: holdScheme + "://x"},
	}}}, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	b.routes[0].pollInterval = 10 * time.Millisecond

	const n = 5
	ctx := context.Background()
	pub, err := relay.OpenPublisher(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	msgs := make([]*relay.Message, n)
	for i := range msgs {
		msgs[i] = relay.NewMessage([]byte{byte(i)})
	}
	// Published before any group exists: kept for the route's group.
	if err := pub.Publish(ctx, "t", msgs...); err != nil {
		t.Fatal(err)
	}

	release := make(chan struct{})
	hold.Lock()
	hold.release = release
	hold.Unlock()
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(runCtx) }()
	stopped := false
	defer func() {
		if !stopped {
			unblock()
			stop()
			<-done
		}
	}()

	// metric returns the value of the /metrics line that starts with name.
	metric := func(name string) string {
		rec := httptest.NewRecorder()
		b.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		for _, l := range strings.Split(rec.Body.String(), "\n") {
			if v, ok := strings.CutPrefix(l, name+" "); ok {
				return v
			}
		}
		return ""
	}
	const lagName, inFlightName = `relay_bridge_source_lag_messages{route="r"}`, `relay_bridge_in_flight{route="r"}`
	wait := func(name string, ok func(v string) bool, want string) string {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			v := metric(name)
			if ok(v) {
				return v
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s is %q after 30s, want %s", name, v, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	is := func(want string) func(string) bool { return func(v string) bool { return v == want } }

	// Every message is delivered and held by a handler blocked on the
	// destination: none is waiting in the group's queue any more.
	wait(inFlightName, is(fmt.Sprint(n)), fmt.Sprint(n))
	// Overwrite the gauge twice and wait for polls to replace it: the
	// second replacement was computed by a poll that started after the
	// first one had written, so after every message was delivered.
	var got string
	for range 2 {
		b.routes[0].m.lag.Set(-1)
		got = wait(lagName, func(v string) bool { return v != "-1" }, "a poll to replace -1")
	}
	if got != fmt.Sprint(n) {
		t.Fatalf("%s = %s while the route holds %d unacked messages, want %d", lagName, got, n, n)
	}
	// Status reports the same, and the held messages' payload bytes.
	if rs := b.Status().Routes[0]; rs.SourceLag == nil || *rs.SourceLag != n || rs.InFlight != n || rs.InFlightBytes != n {
		t.Fatalf("Status: source_lag %v, in_flight %d, in_flight_bytes %d; want %d, %d, %d", rs.SourceLag, rs.InFlight, rs.InFlightBytes, n, n, n)
	}
	unblock()
	wait(lagName, is("0"), "0")
	stop()
	stopped = true
	if err := <-done; err != nil {
		t.Fatalf("drain: %v", err)
	}
}
