package router_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/router"
)

// With WithBatchConcurrency, batches run in several lanes at once, yet
// every Key's messages are handled once each, in publish order, and no two
// batches holding one Key are in the handler together.
func TestBatchConcurrencyKeepsKeyOrder(t *testing.T) {
	const (
		keys  = 7
		total = 2100
		lanes = 4
	)
	broker := "batch-lanes-" + relay.NewID()
	pub, sub := memPair(t, broker, "g", 512)
	if err := sub.(relay.Provisioner).Provision(context.Background(), "in"); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{}
	var msgs []*relay.Message
	for i := range total {
		m := relay.NewMessage([]byte(strconv.Itoa(i)))
		if i%3 != 0 { // a third without a Key
			m.Key = "k" + strconv.Itoa(i%keys)
			want[m.Key] = append(want[m.Key], m.ID)
		}
		msgs = append(msgs, m)
	}
	if err := pub.Publish(context.Background(), "in", msgs...); err != nil {
		t.Fatal(err)
	}

	var (
		mu        sync.Mutex
		got       = map[string][]string{}
		count     = map[string]int{}
		busyKeys  = map[string]bool{}
		clash     string
		inHandler atomic.Int32
		most      atomic.Int32
		handled   atomic.Int32
	)
	r := newRouter(t, router.Config{})
	err := r.AddBatchHandler("lanes", sub, "in", func(_ context.Context, batch []*relay.Message) error {
		n := inHandler.Add(1)
		defer inHandler.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		mu.Lock()
		mine := map[string]bool{}
		for _, m := range batch {
			count[m.ID]++
			if m.Key == "" {
				continue
			}
			if busyKeys[m.Key] && !mine[m.Key] {
				clash = m.Key
			}
			busyKeys[m.Key], mine[m.Key] = true, true
			got[m.Key] = append(got[m.Key], m.ID)
		}
		mu.Unlock()
		time.Sleep(2 * time.Millisecond) // long enough for lanes to overlap
		mu.Lock()
		for k := range mine {
			delete(busyKeys, k)
		}
		mu.Unlock()
		handled.Add(int32(len(batch)))
		return nil
	}, router.WithBatchSize(50), router.WithBatchWait(0), router.WithBatchConcurrency(lanes))
	if err != nil {
		t.Fatal(err)
	}
	stop := runRouter(t, r)
	deadline := time.Now().Add(30 * time.Second)
	for handled.Load() < total && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(count) != total {
		t.Fatalf("handled %d distinct messages, want %d", len(count), total)
	}
	for id, n := range count {
		if n != 1 {
			t.Fatalf("message %s handled %d times", id, n)
		}
	}
	for k, ids := range want {
		if len(got[k]) != len(ids) {
			t.Fatalf("key %s: %d messages, want %d", k, len(got[k]), len(ids))
		}
		for i := range ids {
			if got[k][i] != ids[i] {
				t.Fatalf("key %s: message %d is %s, want %s (out of order)", k, i, got[k][i], ids[i])
			}
		}
	}
	if clash != "" {
		t.Fatalf("key %s was in two batches in the handler at once", clash)
	}
	if most.Load() < 2 {
		t.Fatalf("at most %d batch in the handler at once with %d lanes", most.Load(), lanes)
	}
	relaytest.WaitLag(t, relaytest.LagOf(t, sub), "in", 0)
}

// A batch concurrency below 1 is refused.
func TestBatchConcurrencyValidation(t *testing.T) {
	_, sub := memPair(t, "batch-lanes-v-"+relay.NewID(), "g", 8)
	r := newRouter(t, router.Config{})
	err := r.AddBatchHandler("x", sub, "in", func(context.Context, []*relay.Message) error { return nil }, router.WithBatchConcurrency(0))
	if err == nil {
		t.Fatal("batch concurrency 0 accepted")
	}
}
