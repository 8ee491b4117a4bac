package bridge_test

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/bridge"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// flakyScheme is a destination over a mem:// broker (its host) that
// records every Publish call and fails chosen messages: those whose
// payload starts with "flaky" on their first two attempts, those starting
// with "bad" for good (a limit), each named in a *relay.PublishError while
// the rest of the call is published.
const flakyScheme = "pipelinetest-flaky"

func init() { relay.Register(flakyScheme, flakyOpener{}) }

type flakyOpener struct{}

var flaky = struct {
	sync.Mutex
	calls    map[string][]int // by broker: messages per Publish call
	attempts map[string]int   // by message ID
}{calls: map[string][]int{}, attempts: map[string]int{}}

func (flakyOpener) OpenPublisher(ctx context.Context, u *url.URL) (relay.Publisher, error) {
	pub, err := relay.OpenPublisher(ctx, "mem://"+u.Host)
	if err != nil {
		return nil, err
	}
	return &flakyPublisher{Publisher: pub, broker: u.Host}, nil
}

func (flakyOpener) OpenSubscriber(context.Context, *url.URL) (relay.Subscriber, error) {
	return nil, relay.ErrNotSupported
}

type flakyPublisher struct {
	relay.Publisher
	broker string
}

func (p *flakyPublisher) Publish(ctx context.Context, topic string, msgs ...*relay.Message) error {
	var send []*relay.Message
	var pe relay.PublishError
	flaky.Lock()
	flaky.calls[p.broker] = append(flaky.calls[p.broker], len(msgs))
	for _, m := range msgs {
		flaky.attempts[m.ID]++
		switch s := string(m.Payload); {
		case len(s) >= 3 && s[:3] == "bad":
			pe.Failed = append(pe.Failed, relay.MessageFailure{ID: m.ID, Err: fmt.Errorf("%w: refused", relay.ErrLimit)})
		case len(s) >= 5 && s[:5] == "flaky" && flaky.attempts[m.ID] <= 2:
			pe.Failed = append(pe.Failed, relay.MessageFailure{ID: m.ID, Err: fmt.Errorf("broker busy")})
		default:
			send = append(send, m)
		}
	}
	flaky.Unlock()
	if len(send) > 0 {
		if err := p.Publisher.Publish(ctx, topic, send...); err != nil {
			return err
		}
	}
	if len(pe.Failed) > 0 {
		return &pe
	}
	return nil
}

// A pipelined route publishes batches, and a message that fails inside a
// batch is handled alone: a transient failure is retried until it goes
// through, a permanent one is poisoned, and the rest of the batch is
// forwarded and acked at once. Every message is forwarded once, each Key's
// messages in order, and the source keeps nothing.
func TestPipelineRetriesAndPoisonsWithinBatches(t *testing.T) {
	const total, keys = 600, 8
	a, dst := "mem://"+uniq("a"), uniq("b")
	br, err := bridge.New(bridge.Config{Routes: []bridge.Route{{
		Name:        "pipe",
		From:        bridge.Source{URL: a, Topic: "in", Group: "bridge", InFlight: 512},
		To:          bridge.Destination{URL: flakyScheme + "://" + dst, Topic: "out"},
		Concurrency: 400, // 4 lanes of 100
		Retry:       &bridge.Retry{MaxAttempts: 5, InitialInterval: time.Millisecond},
		Poison:      &bridge.Poison{Topic: "in.poison"},
	}}}, bridge.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	provision(t, a, "bridge", "in")
	provision(t, a, "ops", "in.poison")
	provision(t, "mem://"+dst, "reader", "out")
	var in []*relay.Message
	wantOrder := map[string][]string{}
	bad := map[string]bool{}
	for i := range total {
		var m *relay.Message
		switch {
		case i%97 == 13:
			m = relay.NewMessage([]byte("bad " + strconv.Itoa(i)))
			bad[m.ID] = true
		case i%41 == 7:
			m = relay.NewMessage([]byte("flaky " + strconv.Itoa(i)))
		default:
			m = relay.NewMessage([]byte("ok " + strconv.Itoa(i)))
			m.Key = "k" + strconv.Itoa(i%keys)
			wantOrder[m.Key] = append(wantOrder[m.Key], m.ID)
		}
		in = append(in, m)
	}
	publish(t, a, "in", in...)
	stop := runBridge(t, br)

	got := consume(t, "mem://"+dst, "reader", "out", total-len(bad))
	seen := map[string]int{}
	order := map[string][]string{}
	for _, m := range got {
		seen[m.ID]++
		if m.Key != "" {
			order[m.Key] = append(order[m.Key], m.ID)
		}
	}
	for _, m := range in {
		if want := map[bool]int{true: 0, false: 1}[bad[m.ID]]; seen[m.ID] != want {
			t.Fatalf("message %s (%s) forwarded %d times, want %d", m.ID, m.Payload, seen[m.ID], want)
		}
	}
	for k, ids := range wantOrder {
		for i := range ids {
			if order[k][i] != ids[i] {
				t.Fatalf("key %s: message %d forwarded as %s, want %s", k, i, order[k][i], ids[i])
			}
		}
	}
	poisoned := consume(t, a, "ops", "in.poison", len(bad))
	for _, p := range poisoned {
		if !bad[p.Metadata["relay-poison-original-id"]] {
			t.Fatalf("poisoned %s (%s), not a bad message", p.ID, p.Payload)
		}
	}
	rs := waitRoute(t, br, 0, "every message settled", func(rs bridge.RouteStatus) bool {
		return rs.Forwarded == int64(total-len(bad)) && rs.Poisoned == int64(len(bad))
	})
	if rs.Retries < 1 || rs.InFlight != 0 {
		t.Errorf("retries %d, in flight %d; want retries of the flaky messages, none in flight", rs.Retries, rs.InFlight)
	}
	waitLagOf(t, a, "bridge", "in", 0)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	flaky.Lock()
	calls := flaky.calls[dst]
	flaky.Unlock()
	most := 0
	for _, n := range calls {
		most = max(most, n)
	}
	if most < 10 || len(calls) > total/4 {
		t.Fatalf("%d Publish calls, the largest of %d messages; want batches", len(calls), most)
	}
	t.Logf("%d Publish calls for %d messages, largest %d", len(calls), total, most)
}

// hangScheme is a destination whose open blocks until its ctx is done, as
// a broker that accepts the TCP connection and never answers.
const hangScheme = "pipelinetest-hang"

func init() { relay.Register(hangScheme, hangOpener{}) }

type hangOpener struct{}

func (hangOpener) OpenPublisher(ctx context.Context, _ *url.URL) (relay.Publisher, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (hangOpener) OpenSubscriber(context.Context, *url.URL) (relay.Subscriber, error) {
	return nil, relay.ErrNotSupported
}

// Stopping a bridge whose route is still connecting is a clean stop: Run
// returns nil (relay bridge exits 0 on SIGTERM), not the cancelled open.
func TestStopWhileConnectingIsClean(t *testing.T) {
	br, err := bridge.New(bridge.Config{Routes: []bridge.Route{{
		Name: "connecting",
		From: bridge.Source{URL: "mem://" + uniq("a"), Topic: "in", Group: "g"},
		To:   bridge.Destination{URL: hangScheme + "://x", Topic: "out"},
	}}}, bridge.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- br.Run(ctx) }()
	waitRoute(t, br, 0, "the route connecting", func(rs bridge.RouteStatus) bool { return rs.State == bridge.StateStarting })
	time.Sleep(50 * time.Millisecond) // inside the open
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its ctx was cancelled")
	}
}

// stallScheme is a destination whose Publish never answers: it returns
// only when its ctx (the route's publish timeout) is done.
const stallScheme = "pipelinetest-stall"

func init() { relay.Register(stallScheme, stallOpener{}) }

type stallOpener struct{}

func (stallOpener) OpenPublisher(context.Context, *url.URL) (relay.Publisher, error) {
	return stallPublisher{}, nil
}

func (stallOpener) OpenSubscriber(context.Context, *url.URL) (relay.Subscriber, error) {
	return nil, relay.ErrNotSupported
}

type stallPublisher struct{}

func (stallPublisher) Publish(ctx context.Context, _ string, _ ...*relay.Message) error {
	<-ctx.Done()
	return ctx.Err()
}

func (stallPublisher) Close() error { return nil }

// A bridge that stops while a batch's failed copies are being forwarded
// one by one does not forward the rest alone first (each would wait out
// the publish timeout): they go back to the source, and the drain ends
// within the shutdown timeout.
func TestPipelineStopsRetryingSinglesOnShutdown(t *testing.T) {
	a := "mem://" + uniq("a")
	br, err := bridge.New(bridge.Config{ShutdownTimeout: 4 * time.Second, Routes: []bridge.Route{{
		Name:           "stalled",
		From:           bridge.Source{URL: a, Topic: "in", Group: "g"},
		To:             bridge.Destination{URL: stallScheme + "://x", Topic: "out"},
		PublishTimeout: time.Second,
		Retry:          &bridge.Retry{MaxAttempts: 2, InitialInterval: time.Millisecond},
	}}}, bridge.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	provision(t, a, "g", "in")
	var in []*relay.Message
	for i := range 20 {
		in = append(in, relay.NewMessage([]byte(strconv.Itoa(i))))
	}
	publish(t, a, "in", in...)
	stop := runBridge(t, br)
	// The batch's call timed out and its copies are being forwarded alone.
	waitRoute(t, br, 0, "a retry", func(rs bridge.RouteStatus) bool { return rs.Retries >= 1 })
	start := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("stop: %v (after %v)", err, time.Since(start).Round(time.Millisecond))
	}
	// Nothing was forwarded or lost: every message is back at the source.
	waitLagOf(t, a, "g", "in", 20)
}

// A dedup route is pipelined: each ID is forwarded once although copies
// of it come in the same batch (twins published back to back) and in
// later batches (published again after the first round was forwarded),
// also when its first copy failed in its batch and was retried alone.
// Every copy not forwarded counts as a duplicate, and the source keeps
// nothing.
func TestPipelineDedup(t *testing.T) {
	t.Run("store=memory", func(t *testing.T) { testPipelineDedup(t, &bridge.Dedup{}) })
	// The Redis store takes the batch path: a batch's keys are reserved,
	// committed and released in one call each.
	t.Run("store=redis", func(t *testing.T) {
		testenv.HoldBroker(t, "redis")
		testPipelineDedup(t, &bridge.Dedup{Store: testenv.Redis(t), TTL: time.Minute})
	})
}

func testPipelineDedup(t *testing.T, dedup *bridge.Dedup) {
	const total, keys = 400, 8
	a, dst := "mem://"+uniq("a"), uniq("b")
	br, err := bridge.New(bridge.Config{Routes: []bridge.Route{{
		Name:        "dedup",
		From:        bridge.Source{URL: a, Topic: "in", Group: "bridge", InFlight: 512},
		To:          bridge.Destination{URL: flakyScheme + "://" + dst, Topic: "out"},
		Concurrency: 200, // 4 lanes of 50
		Batch:       50,
		Retry:       &bridge.Retry{MaxAttempts: 5, InitialInterval: time.Millisecond},
		Dedup:       dedup,
	}}}, bridge.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if !bridge.Pipelined(br, 0) {
		t.Fatal("the dedup route does not take the pipelined path")
	}
	provision(t, a, "bridge", "in")
	provision(t, "mem://"+dst, "reader", "out")
	var in, again []*relay.Message
	twins := 0
	for i := range total {
		payload := "ok " + strconv.Itoa(i)
		if i%37 == 5 {
			payload = "flaky " + strconv.Itoa(i)
		}
		m := relay.NewMessage([]byte(payload))
		m.Key = "k" + strconv.Itoa(i%keys)
		in = append(in, m)
		if i%4 == 0 {
			in = append(in, m.Copy())
			twins++
		}
		if i%3 == 0 {
			again = append(again, m.Copy())
		}
	}
	publish(t, a, "in", in...)
	stop := runBridge(t, br)
	got := consume(t, "mem://"+dst, "reader", "out", total)
	waitRoute(t, br, 0, "the first round settled", func(rs bridge.RouteStatus) bool {
		return rs.Forwarded == total && rs.Duplicates == int64(twins)
	})
	waitLagOf(t, a, "bridge", "in", 0)
	publish(t, a, "in", again...)
	rs := waitRoute(t, br, 0, "the second round settled", func(rs bridge.RouteStatus) bool {
		return rs.Duplicates == int64(twins+len(again))
	})
	waitLagOf(t, a, "bridge", "in", 0)
	if rs.Forwarded != total || rs.InFlight != 0 {
		t.Errorf("forwarded %d, in flight %d; want %d, 0", rs.Forwarded, rs.InFlight, total)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, m := range got {
		seen[m.ID]++
	}
	for _, m := range in {
		if seen[m.ID] != 1 {
			t.Fatalf("message %s (%s) forwarded %d times, want 1", m.ID, m.Payload, seen[m.ID])
		}
	}
	if n := lagOf(t, "mem://"+dst, "reader", "out"); n != 0 {
		t.Fatalf("%d more copies at the destination; want each ID once", n)
	}
	flaky.Lock()
	calls := flaky.calls[dst]
	flaky.Unlock()
	most := 0
	for _, n := range calls {
		most = max(most, n)
	}
	if most < 10 || len(calls) > total/4 {
		t.Fatalf("%d Publish calls, the largest of %d messages; want batches", len(calls), most)
	}
	t.Logf("%d Publish calls for %d messages, largest %d", len(calls), len(in)+len(again), most)
}
