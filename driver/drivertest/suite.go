package drivertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/go-relay/relay"
)

type check struct {
	name string
	what string
	run  func(t *testing.T, e *env)
}

var checks = []check{
	{"RoundTrip", "ID, Key, Metadata and Payload (binary, empty, large, unicode, many keys) arrive byte-exact", roundTrip},
	{"CompetingConsumers", "two members of one group share the messages without loss", competingConsumers},
	{"FanOut", "every group receives its own copy", fanOut},
	{"NackRedelivery", "Nack redelivers with Attempt 2; NackAfter waits at least the delay", nackRedelivery},
	{"RedeliveryAfterClose", "unacked messages of a closed subscriber go to another member of the group", redeliveryAfterClose},
	{"RedeliveryAfterCancel", "unacked messages of a cancelled subscription are released to the group", redeliveryAfterCancel},
	{"Ordering", "publish order is kept where the backend declares it", ordering},
	{"ConcurrentPublish", "50 goroutines publish at once messages that share one Metadata map; every message arrives and the map is unchanged", concurrentPublish},
	{"Settlement", "Ack/Nack are idempotent, exclusive, end the message context, fail after the subscription ended", settlement},
	{"AsyncPublish", "PublishAsync from one goroutine: every done called once, every message arrives, a call's messages in order; early failures returned, not reported to done", asyncPublish},
	{"BatchPath", "SubscribeBatches (the shared layer's batch path): every message once, with its payload, in order where the backend orders; the channel closes at the end", batchPath},
	{"NilMessage", "a batch holding a nil message is refused by Publish and PublishAsync with relay.ErrNilMessage naming its index, not a panic, and nothing of it is sent", nilMessage},
	{"EmptyID", "a message published with ID \"\" gets a UUIDv7 in the caller's message and is delivered with it", emptyID},
	{"RepeatedSettlement", "the first settlement wins: repeats the same way return nil and change nothing, the other way ErrAlreadySettled", repeatedSettlement},
	{"ClosedChannelAcked", "acks made before a subscription ended are at the broker when its channel closed", closedChannelAcked},
	{"ClosedChannelUnsettled", "an unsettled message is released when the subscription ends; acked ones come back only where AckedAfterUnsettledRedelivered", closedChannelUnsettled},
	{"NackAfterAcrossEnd", "NackAfter then the end of the subscription: a native delay holds, an emulated one is released; the message comes back", nackAfterAcrossEnd},
	{"InFlightBytes", "inflight_bytes bounds the bytes of unsettled messages beside inflight: 2 of 60 KiB held under 150 KiB, one more after an ack", inFlightBytes},
	{"NackAfterWindow", "a message waiting out a NackAfter holds no slot of the in-flight window", nackAfterWindow},
	{"DelayedDelivery", "Message.DeliverAt: nothing delivered before its time, everything after it, in due order where the backend orders; refused where unsupported", delayedDelivery},
	{"DelayedAcrossRestart", "a delayed message that falls due while no subscriber runs reaches the next one", delayedAcrossRestart},
	{"History", "ReadHistory (where implemented) reads every message byte-exact with its position, consumes nothing, and a delivery's Position is the history's", history},
	{"ContextCancel", "cancelling the Subscribe ctx closes the channel", contextCancel},
	{"Close", "Close is idempotent, closes every channel before returning, rejects later use with ErrClosed", closeSemantics},
	{"Oversize", "a message over the backend's limit is refused with a typed error", oversize},
	{"StrictURL", "an unknown URL parameter is an error naming it", strictURL},
	{"HungBrokerClose", "against a broker that stopped answering, Subscriber.Close and Publisher.Close return within the contract's bound, closing every channel", hungBrokerClose},
	{"Reconnect", "publishing and consuming resume after a broker restart", reconnect},
}

// Run runs every conformance check as a subtest of t, each checking for
// goroutine leaks, and logs what each one verified.
func Run(t *testing.T, h Harness) {
	h.defaults(t)
	e := &env{h: &h}
	if h.Capabilities != nil {
		e.caps = *h.Capabilities
	} else {
		p := h.NewPublisher(t)
		if cr, ok := p.(relay.CapabilityReporter); ok {
			e.caps = cr.Capabilities()
		}
		_ = p.Close()
	}
	t.Logf("drivertest: backend %q capabilities %+v", e.caps.Backend, e.caps)
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			opts := append([]goleak.Option{goleak.IgnoreCurrent()}, h.IgnoreGoroutines...)
			t.Cleanup(func() {
				if !t.Failed() && !t.Skipped() {
					goleak.VerifyNone(t, opts...)
				}
			})
			c.run(t, e)
			if !t.Skipped() && !t.Failed() {
				t.Logf("checked: %s", c.what)
			}
		})
	}
}

func roundTrip(t *testing.T, e *env) {
	topic := e.h.NewTopic(t)
	pub := e.pub(t)
	sub := e.sub(t, e.h.NewGroup(t))
	provision(t, sub, topic)
	ch, _ := subscribe(t, sub, topic)

	large := e.h.LargePayload
	if large == 0 {
		large = 1 << 20
		if max := e.caps.MaxMessageBytes; max > 0 && large > max-4096 {
			large = max - 4096
		}
	}
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	big := make([]byte, large)
	for i := range big {
		big[i] = byte(i*7 + i>>8)
	}
	many := relay.Metadata{}
	for i := 0; i < 40; i++ {
		many[fmt.Sprintf("key-%02d", i)] = strings.Repeat("v", i)
	}
	msgs := []*relay.Message{
		{ID: relay.NewID(), Key: "k1", Payload: binary, Metadata: relay.Metadata{"content-type": "application/octet-stream"}},
		{ID: relay.NewID(), Payload: nil},
		{ID: relay.NewID(), Payload: []byte{}},
		{ID: relay.NewID(), Key: "ключ-🔑", Payload: []byte("grüße, 世界 🌍"), Metadata: relay.Metadata{"naïve-キー": "välue ✓", "emoji": "🚀"}},
		{ID: relay.NewID(), Key: "k2", Payload: []byte("many headers"), Metadata: many},
		{ID: relay.NewID(), Payload: []byte("odd values"), Metadata: relay.Metadata{"empty": "", "spaces": "  a b  ", "json": `{"a":[1,2]}`, "newline": "a\nb"}},
	}
	publish(t, pub, topic, msgs...)
	bigMsg := &relay.Message{ID: relay.NewID(), Key: "big", Payload: big}
	publish(t, pub, topic, bigMsg)
	msgs = append(msgs, bigMsg)

	byID := map[string]*relay.Message{}
	for _, m := range msgs {
		byID[m.ID] = m
	}
	for range msgs {
		got := e.next(t, ch, "round trip")
		want, ok := byID[got.ID]
		if !ok {
			t.Fatalf("unexpected message ID %q", got.ID)
		}
		delete(byID, got.ID)
		if got.Key != want.Key {
			t.Errorf("message %s: Key %q, want %q", got.ID, got.Key, want.Key)
		}
		if !samePayload(got.Payload, want.Payload) {
			t.Errorf("message %s: payload differs (len %d, want %d)", got.ID, len(got.Payload), len(want.Payload))
		}
		if !sameMetadata(got.Metadata, want.Metadata) {
			t.Errorf("message %s: metadata %q, want %q", got.ID, got.Metadata, want.Metadata)
		}
		if got.Topic() != topic {
			t.Errorf("message %s: Topic() %q, want %q", got.ID, got.Topic(), topic)
		}
		if got.Attempt() != 1 {
			t.Errorf("message %s: Attempt() %d on first delivery, want 1", got.ID, got.Attempt())
		}
		if err := got.Ack(); err != nil {
			t.Fatalf("Ack: %v", err)
		}
	}
	t.Logf("round-tripped %d messages, largest payload %d bytes, up to %d metadata keys", len(msgs), large, len(many))
}

func competingConsumers(t *testing.T, e *env) {
	if e.h.NoCompetingConsumers != "" {
		t.Skipf("SKIP: backend %q has no competing consumers: %s", e.caps.Backend, e.h.NoCompetingConsumers)
	}
	topic, group := e.h.NewTopic(t), e.h.NewGroup(t)
	pub := e.pub(t)
	s1, s2 := e.sub(t, group), e.sub(t, group)
	provision(t, s1, topic)
	ch1, _ := subscribe(t, s1, topic)
	ch2, _ := subscribe(t, s2, topic)

	const n = 200
	msgs := make([]*relay.Message, n)
	for i := range msgs {
		msgs[i] = relay.NewMessage([]byte(fmt.Sprintf("job %d", i)))
		msgs[i].Key = fmt.Sprintf("k%d", i%8)
	}
	publish(t, pub, topic, msgs...)

	var mu sync.Mutex
	seen := map[string]int{}
	per := [2]int{}
	done := make(chan struct{})
	var once sync.Once
	consume := func(i int, ch <-chan *relay.Message) {
		for m := range ch {
			time.Sleep(time.Millisecond) // a little work, so that both members pull
			mu.Lock()
			seen[m.ID]++
			per[i]++
			complete := len(seen) == n
			mu.Unlock()
			if err := m.Ack(); err != nil {
				t.Errorf("Ack: %v", err)
			}
			if complete {
				once.Do(func() { close(done) })
			}
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); consume(0, ch1) }()
	go func() { defer wg.Done(); consume(1, ch2) }()
	select {
	case <-done:
	case <-time.After(e.h.ReceiveTimeout + 30*time.Second):
		mu.Lock()
		got := len(seen)
		mu.Unlock()
		t.Errorf("only %d of %d messages received by the group", got, n)
	}
	_ = s1.Close()
	_ = s2.Close()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for _, m := range msgs {
		if seen[m.ID] == 0 {
			t.Errorf("message %s lost", m.ID)
		}
	}
	dups := 0
	for _, c := range seen {
		dups += c - 1
	}
	t.Logf("split between members: %d / %d; duplicates: %d", per[0], per[1], dups)
	if e.h.SkipShareCheck != "" {
		t.Logf("share check skipped: %s", e.h.SkipShareCheck)
	} else if per[0] == 0 || per[1] == 0 {
		t.Errorf("one member received nothing (%d / %d): messages were not shared", per[0], per[1])
	}
}

func fanOut(t *testing.T, e *env) {
	if e.h.NoGroups != "" {
		t.Skipf("SKIP: backend %q has no groups: %s", e.caps.Backend, e.h.NoGroups)
	}
	topic := e.h.NewTopic(t)
	pub := e.pub(t)
	groups := []string{e.h.NewGroup(t), e.h.NewGroup(t), e.h.NewGroup(t)}
	var chans []<-chan *relay.Message
	for _, g := range groups {
		s := e.sub(t, g)
		provision(t, s, topic)
		ch, _ := subscribe(t, s, topic)
		chans = append(chans, ch)
	}
	msgs := make([]*relay.Message, 20)
	for i := range msgs {
		msgs[i] = relay.NewMessage([]byte(fmt.Sprintf("event %d", i)))
	}
	publish(t, pub, topic, msgs...)
	for i, ch := range chans {
		seen := e.collect(t, ch, ids(msgs), true)
		if len(seen) != len(msgs) {
			t.Errorf("group %s: %d distinct messages, want %d", groups[i], len(seen), len(msgs))
		}
	}
	t.Logf("%d groups each received all %d messages", len(groups), len(msgs))
}

func ordering(t *testing.T, e *env) {
	if e.caps.Ordering == "" || e.caps.Ordering == relay.OrderNone {
		t.Skipf("SKIP: backend %q declares no ordering", e.caps.Backend)
	}
	topic := e.h.NewTopic(t)
	pub := e.pub(t)
	sub := e.sub(t, e.h.NewGroup(t))
	provision(t, sub, topic)
	ch, _ := subscribe(t, sub, topic)
	const n, keys = 200, 4
	msgs := make([]*relay.Message, n)
	for i := range msgs {
		msgs[i] = relay.NewMessage([]byte(fmt.Sprint(i)))
		msgs[i].Key = fmt.Sprintf("key-%d", i%keys)
	}
	// Several publish calls, so batching in the adapter is exercised too.
	for i := 0; i < n; i += 50 {
		publish(t, pub, topic, msgs[i:i+50]...)
	}
	pos := map[string]int{}
	for i, m := range msgs {
		pos[m.ID] = i
	}
	lastPerKey := map[string]int{}
	last := -1
	for range msgs {
		m := e.next(t, ch, "ordered delivery")
		p, ok := pos[m.ID]
		if !ok {
			t.Fatalf("unexpected message %s", m.ID)
		}
		if prev, ok := lastPerKey[m.Key]; ok && p < prev {
			t.Errorf("key %s: message #%d delivered after #%d", m.Key, p, prev)
		}
		lastPerKey[m.Key] = p
		if e.caps.Ordering == relay.OrderPerTopic && p < last {
			t.Errorf("topic order: message #%d delivered after #%d", p, last)
		}
		last = max(last, p)
		if err := m.Ack(); err != nil {
			t.Fatalf("Ack: %v", err)
		}
	}
	t.Logf("%d messages over %d keys delivered in order (%s)", n, keys, e.caps.Ordering)
}

func concurrentPublish(t *testing.T, e *env) {
	topic := e.h.NewTopic(t)
	pub := e.pub(t)
	sub := e.sub(t, e.h.NewGroup(t))
	provision(t, sub, topic)
	ch, _ := subscribe(t, sub, topic)
	const goroutines, each = 50, 10
	// One Metadata map for all: Publish only reads its messages'
	// metadata (relay.Publisher), so callers such as the bridge may share
	// one map between messages and concurrent calls. A driver that wrote
	// into it would race here (go test -race) or change it.
	shared := relay.Metadata{"shared": "yes", "relay-shared": "reserved name"}
	all := make([]*relay.Message, goroutines*each)
	for i := range all {
		all[i] = relay.NewMessage([]byte(fmt.Sprintf("concurrent %d", i)))
		all[i].Key = fmt.Sprintf("k%d", i%goroutines)
		all[i].Metadata = shared
	}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(batch []*relay.Message) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for i := range batch {
				if err := pub.Publish(ctx, topic, batch[i]); err != nil {
					errs <- err
					return
				}
			}
		}(all[g*each : (g+1)*each])
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent Publish: %v", err)
	}
	if len(shared) != 2 || shared["shared"] != "yes" || shared["relay-shared"] != "reserved name" {
		t.Errorf("Publish changed the messages' shared Metadata map: %v", shared)
	}
	seen := e.collect(t, ch, ids(all), true)
	dups := 0
	for _, c := range seen {
		dups += c - 1
	}
	if dups > 0 {
		t.Errorf("%d duplicate deliveries without any failure", dups)
	}
	t.Logf("%d goroutines × %d publishes: %d distinct messages received", goroutines, each, len(seen))
}

func settlement(t *testing.T, e *env) {
	topic := e.h.NewTopic(t)
	pub := e.pub(t)
	sub := e.sub(t, e.h.NewGroup(t))
	provision(t, sub, topic)
	ch, cancel := subscribe(t, sub, topic)
	a, b := relay.NewMessage([]byte("a")), relay.NewMessage([]byte("b"))
	publish(t, pub, topic, a, b)
	m1 := e.next(t, ch, "first")
	if m1.Context().Err() != nil {
		t.Errorf("message context done before settlement")
	}
	if err := m1.Ack(); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if err := m1.Ack(); err != nil {
		t.Errorf("second Ack = %v, want nil (idempotent)", err)
	}
	if err := m1.Nack(); !errors.Is(err, relay.ErrAlreadySettled) {
		t.Errorf("Nack after Ack = %v, want ErrAlreadySettled", err)
	}
	if m1.Context().Err() == nil {
		t.Errorf("message context not done after Ack")
	}
	m2 := e.next(t, ch, "second")
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); _ = m2.Ack() }() // concurrent settlement must be safe
	}
	wg.Wait()
	if err := m2.Nack(); !errors.Is(err, relay.ErrAlreadySettled) {
		t.Errorf("Nack after concurrent Acks = %v, want ErrAlreadySettled", err)
	}
	c := relay.NewMessage([]byte("c"))
	publish(t, pub, topic, c)
	m3 := e.next(t, ch, "third")
	cancel()
	expectClosed(t, ch, "cancelled subscription", 10*time.Second)
	if m3.Context().Err() == nil {
		t.Errorf("message context not done after the subscription ended")
	}
	if err := m3.Ack(); !errors.Is(err, relay.ErrSubscriptionEnded) {
		t.Errorf("Ack after the subscription ended = %v, want ErrSubscriptionEnded", err)
	}
	if e.h.NoRedeliveryAfterEnd != "" {
		t.Logf("release step skipped: %s", e.h.NoRedeliveryAfterEnd)
		return
	}
	// The unsettled message went back to the group.
	ch2, _ := subscribe(t, sub, topic)
	got := e.next(t, ch2, "released message")
	if got.ID != c.ID {
		t.Errorf("released message ID %s, want %s", got.ID, c.ID)
	}
	_ = got.Ack()
	if extra := none(ch2, 500*time.Millisecond); extra != nil {
		t.Errorf("acked message %s delivered again", extra.ID)
	}
}
