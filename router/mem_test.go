package router_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/memory"
	"github.com/go-relay/relay/router"
)

// memPair opens a publisher and a subscriber of group on a fresh broker.
func memPair(t testing.TB, broker, group string, inflight int) (relay.Publisher, relay.Subscriber) {
	t.Helper()
	pub := memory.NewPublisher(broker, memory.PublisherConfig{})
	sub, err := memory.NewSubscriber(broker, memory.SubscriberConfig{Group: group, InFlight: inflight})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close(); _ = pub.Close() })
	return pub, sub
}

// readN subscribes with a fresh subscriber of group and returns the IDs of
// the next n messages, acking them.
func readN(t *testing.T, broker, group, topic string, n int) []string {
	t.Helper()
	sub, err := memory.NewSubscriber(broker, memory.SubscriberConfig{Group: group})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for len(ids) < n {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatalf("read %d of %d messages from %s/%s", len(ids), n, topic, group)
			}
			ids = append(ids, m.ID)
			_ = m.Ack()
		case <-ctx.Done():
			t.Fatalf("read %d of %d messages from %s/%s", len(ids), n, topic, group)
		}
	}
	return ids
}

// readUntilSentinel publishes a sentinel and returns the IDs delivered
// before it (mem:// delivers in publish order, redeliveries in their
// original place), so that "nothing else is there" is checked without
// waiting for a timeout.
func readUntilSentinel(t *testing.T, broker, group, topic string) []string {
	t.Helper()
	pub := memory.NewPublisher(broker, memory.PublisherConfig{})
	defer pub.Close()
	sentinel := relay.NewMessage([]byte("sentinel"))
	if err := pub.Publish(context.Background(), topic, sentinel); err != nil {
		t.Fatal(err)
	}
	sub, err := memory.NewSubscriber(broker, memory.SubscriberConfig{Group: group})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatal("subscription ended before the sentinel")
			}
			_ = m.Ack()
			if m.ID == sentinel.ID {
				return ids
			}
			ids = append(ids, m.ID)
		case <-ctx.Done():
			t.Fatal("sentinel not received")
		}
	}
}

func TestPerKeyOrderConcurrency16(t *testing.T) {
	const (
		keys   = 40
		perKey = 50
		conc   = 16
	)
	broker := "order-" + relay.NewID()
	pub, sub := memPair(t, broker, "g", 256)
	if err := sub.(relay.Provisioner).Provision(context.Background(), "in"); err != nil {
		t.Fatal(err)
	}
	// Interleave keys in publish order.
	var msgs []*relay.Message
	for i := range perKey {
		for k := range keys {
			m := relay.NewMessage([]byte(strconv.Itoa(i)))
			m.Key = fmt.Sprintf("k%02d", k)
			msgs = append(msgs, m)
		}
	}
	if err := pub.Publish(context.Background(), "in", msgs...); err != nil {
		t.Fatal(err)
	}

	var (
		mu      sync.Mutex
		seen    = map[string][]int{}
		busy    = map[string]int{}
		running int
		peak    int
		overlap []string
		done    = make(chan struct{})
		total   int
	)
	h := func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
		mu.Lock()
		busy[m.Key]++
		if busy[m.Key] > 1 {
			overlap = append(overlap, m.Key)
		}
		running++
		peak = max(peak, running)
		mu.Unlock()
		time.Sleep(50 * time.Microsecond) // give other lanes a chance to overlap
		n, _ := strconv.Atoi(string(m.Payload))
		mu.Lock()
		busy[m.Key]--
		running--
		seen[m.Key] = append(seen[m.Key], n)
		total++
		if total == keys*perKey {
			close(done)
		}
		mu.Unlock()
		return nil, nil
	}
	r := newRouter(t, router.Config{})
	if err := r.AddHandler("ordered", sub, "in", h, router.WithConcurrency(conc)); err != nil {
		t.Fatal(err)
	}
	stop := runRouter(t, r)
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("not all messages handled")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(overlap) > 0 {
		t.Fatalf("messages of one key handled concurrently: %v", overlap[:min(5, len(overlap))])
	}
	want := make([]int, perKey)
	for i := range want {
		want[i] = i
	}
	for k, got := range seen {
		if !slices.Equal(got, want) {
			t.Fatalf("key %s handled out of order: %v", k, got)
		}
	}
	if len(seen) != keys {
		t.Fatalf("%d keys seen", len(seen))
	}
	t.Logf("peak concurrency %d of %d", peak, conc)
}

func TestDifferentKeysRunInParallel(t *testing.T) {
	broker := "par-" + relay.NewID()
	pub, sub := memPair(t, broker, "g", 64)
	// One message for each of 8 keys on 8 lanes: at least two of them
	// must run at the same time (keys may share a lane by hashing).
	var msgs []*relay.Message
	for k := range 8 {
		m := relay.NewMessage(nil)
		m.Key = fmt.Sprintf("key-%d", k)
		msgs = append(msgs, m)
	}
	if err := sub.(relay.Provisioner).Provision(context.Background(), "in"); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(context.Background(), "in", msgs...); err != nil {
		t.Fatal(err)
	}
	both := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	running := 0
	var handled sync.WaitGroup
	handled.Add(len(msgs))
	h := func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
		defer handled.Done()
		mu.Lock()
		running++
		if running >= 2 {
			once.Do(func() { close(both) })
		}
		mu.Unlock()
		select { // wait for a second message to run at the same time
		case <-both:
		case <-time.After(10 * time.Second):
		}
		mu.Lock()
		running--
		mu.Unlock()
		return nil, nil
	}
	r := newRouter(t, router.Config{})
	if err := r.AddHandler("par", sub, "in", h, router.WithConcurrency(8)); err != nil {
		t.Fatal(err)
	}
	runRouter(t, r)
	handled.Wait()
	select {
	case <-both:
	default:
		t.Fatal("no two keys were handled at the same time")
	}
}

func TestGracefulShutdownWithInFlightWork(t *testing.T) {
	const (
		total = 20
		conc  = 4
	)
	broker := "drain-" + relay.NewID()
	pub, sub := memPair(t, broker, "g", 64)
	outSub, err := memory.NewSubscriber(broker, memory.SubscriberConfig{Group: "out"})
	if err != nil {
		t.Fatal(err)
	}
	if err := outSub.(relay.Provisioner).Provision(context.Background(), "out"); err != nil {
		t.Fatal(err)
	}
	_ = outSub.Close()
	if err := sub.(relay.Provisioner).Provision(context.Background(), "in"); err != nil {
		t.Fatal(err)
	}
	var msgs []*relay.Message
	for i := range total {
		msgs = append(msgs, relay.NewMessage([]byte(strconv.Itoa(i))))
	}
	if err := pub.Publish(context.Background(), "in", msgs...); err != nil {
		t.Fatal(err)
	}

	outPub := memory.NewPublisher(broker, memory.PublisherConfig{})
	started := make(chan string, total)
	release := make(chan struct{})
	var mu sync.Mutex
	var ctxErrs []error
	var msgCtxErrs []error
	stopping := make(chan (<-chan struct{}), 1)
	h := func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
		select {
		case stopping <- router.Stopping(ctx):
		default:
		}
		started <- m.ID
		<-release
		mu.Lock()
		ctxErrs = append(ctxErrs, ctx.Err())
		msgCtxErrs = append(msgCtxErrs, m.Context().Err())
		mu.Unlock()
		out := relay.NewMessage(m.Payload)
		out.Metadata = relay.Metadata{"from": m.ID}
		return []*relay.Message{out}, nil
	}
	r := newRouter(t, router.Config{CloseTimeout: time.Minute})
	if err := r.AddHandler("drain", sub, "in", h, router.WithConcurrency(conc), router.WithOutput(outPub, "out")); err != nil {
		t.Fatal(err)
	}
	// The router closes both after the drain, not before; owning the
	// subscriber makes Run return only once it has sent the settlements
	// and released the rest.
	r.Own(sub, outPub)
	stop := runRouter(t, r)

	var inFlight []string
	for range conc {
		inFlight = append(inFlight, <-started)
	}
	closed := make(chan error, 1)
	go func() { closed <- stop() }()
	// Wait until the router began draining, then let the handlers finish.
	<-<-stopping
	select {
	case <-r.Done():
		t.Fatal("router stopped without waiting for in-flight handlers")
	default:
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	// Handlers still in progress at shutdown may have been joined by the
	// ones that started before the stop signal reached them.
	close(started)
	for id := range started {
		inFlight = append(inFlight, id)
	}

	mu.Lock()
	for i, e := range ctxErrs {
		if e != nil || msgCtxErrs[i] != nil {
			t.Fatalf("in-flight handler saw a cancelled context: handler ctx %v, message ctx %v", e, msgCtxErrs[i])
		}
	}
	mu.Unlock()

	// Each in-flight message's output was published, and the input acked:
	// the group holds exactly the messages that were not started.
	outs := readUntilSentinel(t, broker, "out", "out")
	if len(outs) != len(inFlight) {
		t.Fatalf("%d outputs for %d in-flight messages", len(outs), len(inFlight))
	}
	left := readUntilSentinel(t, broker, "g", "in")
	var all []string
	all = append(all, inFlight...)
	all = append(all, left...)
	slices.Sort(all)
	var want []string
	for _, m := range msgs {
		want = append(want, m.ID)
	}
	slices.Sort(want)
	if !slices.Equal(all, want) {
		t.Fatalf("messages lost or duplicated: handled %d + left %d, want %d", len(inFlight), len(left), total)
	}
	for _, id := range inFlight {
		if slices.Contains(left, id) {
			t.Fatalf("in-flight message %s was not acked", id)
		}
	}
	if err := outPub.Publish(context.Background(), "out", relay.NewMessage(nil)); !errors.Is(err, relay.ErrClosed) {
		t.Fatalf("owned publisher not closed: %v", err)
	}
}

func TestCloseTimeoutCancelsHandlerContext(t *testing.T) {
	broker := "timeout-" + relay.NewID()
	pub, sub := memPair(t, broker, "g", 64)
	if err := sub.(relay.Provisioner).Provision(context.Background(), "in"); err != nil {
		t.Fatal(err)
	}
	m := relay.NewMessage(nil)
	if err := pub.Publish(context.Background(), "in", m); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	h := func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
		close(started)
		<-ctx.Done() // a handler that honours its context
		return nil, ctx.Err()
	}
	r := newRouter(t, router.Config{CloseTimeout: 20 * time.Millisecond, RedeliveryDelay: router.NoRedeliveryDelay})
	if err := r.AddHandler("slow", sub, "in", h); err != nil {
		t.Fatal(err)
	}
	r.Own(sub)
	stop := runRouter(t, r)
	<-started
	if err := stop(); !errors.Is(err, router.ErrCloseTimeout) {
		t.Fatalf("shutdown: %v, want ErrCloseTimeout", err)
	}
	// The cancelled handler's message went back to the group.
	if got := readN(t, broker, "g", "in", 1); got[0] != m.ID {
		t.Fatalf("got %v", got)
	}
}

func TestStuckHandlerDoesNotBlockClose(t *testing.T) {
	sub := newFakeSub()
	pub := newFakePub()
	release := make(chan struct{})
	started := make(chan struct{})
	r := newRouter(t, router.Config{CloseTimeout: 10 * time.Millisecond})
	_ = r.AddHandler("stuck", sub, "in", func(context.Context, *relay.Message) ([]*relay.Message, error) {
		close(started)
		<-release // ignores its context
		return nil, nil
	})
	r.Own(pub)
	stop := runRouter(t, r)
	sub.push(t, sub.msg("m1", "", 1))
	<-started
	err := stop()
	if !errors.Is(err, router.ErrCloseTimeout) || !strings.Contains(err.Error(), "stuck") {
		t.Fatalf("shutdown: %v", err)
	}
	if pub.closeCount() != 1 {
		t.Fatal("owned publisher not closed")
	}
	close(release) // let the goroutine end before goleak checks
}
