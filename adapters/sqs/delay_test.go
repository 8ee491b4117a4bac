package sqs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
	relaysqs "github.com/go-relay/relay/adapters/sqs"
	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// TestDelayFIFORefused: a FIFO queue takes no per-message DelaySeconds,
// so a delayed message to one is refused with ErrDelayUnsupported naming
// FIFO (nothing sent), whether the queue sits among standard ones or the
// publisher is fifo=true, which then declares no delayed delivery at all.
func TestDelayFIFORefused(t *testing.T) {
	ctx := context.Background()
	fifo := name("delayfifo") + ".fifo"
	for _, u := range []string{baseURL(t, relaysqs.SchemeSQS), baseURL(t, relaysqs.SchemeSQS, "fifo=true")} {
		pub := relaytest.OpenPublisher(t, u)
		m := &relay.Message{ID: relay.NewID(), Key: "k", Payload: []byte("later")}
		err := pub.Publish(ctx, fifo, m.DeliverAfter(2*time.Second))
		if !errors.Is(err, relay.ErrDelayUnsupported) {
			t.Fatalf("delayed Publish to FIFO queue %s: %v, want ErrDelayUnsupported", fifo, err)
		}
		if strings.Contains(u, "fifo=true") {
			if got := pub.(relay.CapabilityReporter).Capabilities().DelayedDelivery; got != relay.DelayNone {
				t.Errorf("fifo=true declares DelayedDelivery %q, want none", got)
			}
		} else if !strings.Contains(err.Error(), "FIFO") {
			t.Errorf("the refusal does not name FIFO: %v", err)
		}
	}
}

// delayRecorder records the DelaySeconds of every SendMessage and
// SendMessageBatch entry the publisher sends.
type delayRecorder struct {
	next   http.RoundTripper
	mu     sync.Mutex
	delays []int
}

func (r *delayRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil && strings.Contains(req.Header.Get("X-Amz-Target"), "SendMessage") {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		var in struct {
			DelaySeconds int
			Entries      []struct{ DelaySeconds int }
		}
		if err := json.Unmarshal(body, &in); err == nil {
			r.mu.Lock()
			if in.Entries == nil {
				r.delays = append(r.delays, in.DelaySeconds)
			}
			for _, e := range in.Entries {
				r.delays = append(r.delays, e.DelaySeconds)
			}
			r.mu.Unlock()
		}
	}
	return r.next.RoundTrip(req)
}

// TestDelaySecondsRoundedUp: DeliverAt becomes DelaySeconds rounded up to
// the whole second (never early), in batch and in single calls, and 0
// for messages without a delay or with a past DeliverAt.
func TestDelaySecondsRoundedUp(t *testing.T) {
	ctx := context.Background()
	for _, batch := range []bool{true, false} {
		rec := &delayRecorder{}
		cfg := benchConfig(t)
		cfg.NoBatchCalls = !batch
		pub, err := relaysqs.NewSQSPublisher(ctx, cfg, relaysqs.WithRoundTripper(func(rt http.RoundTripper) http.RoundTripper {
			rec.next = rt
			return rec
		}))
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		msgs := []*relay.Message{
			{ID: relay.NewID(), Payload: []byte("a"), DeliverAt: now.Add(1200 * time.Millisecond)},
			{ID: relay.NewID(), Payload: []byte("b")},
			{ID: relay.NewID(), Payload: []byte("c"), DeliverAt: now.Add(-time.Minute)},
			{ID: relay.NewID(), Payload: []byte("d"), DeliverAt: now.Add(10*time.Minute + 100*time.Millisecond)},
		}
		if err := pub.Publish(ctx, name("delaysecs"), msgs...); err != nil {
			t.Fatal(err)
		}
		_ = pub.Close()
		want := []int{2, 0, 0, 601}
		rec.mu.Lock()
		got := rec.delays
		rec.mu.Unlock()
		if len(got) != len(want) {
			t.Fatalf("batch=%v: DelaySeconds sent %v, want %v", batch, got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("batch=%v: DelaySeconds sent %v, want %v", batch, got, want)
				break
			}
		}
	}
}

func BenchmarkDelayLateness(b *testing.B) {
	u := baseURL(b, relaysqs.SchemeSQS, "visibility=10s")
	if service(b).Emulated {
		u += "&batch_calls=false" // goaws ignores DelaySeconds in batch entries
	}
	drivertest.BenchmarkDelayLateness(b, drivertest.Harness{
		NewPublisher:  func(t testing.TB) relay.Publisher { return relaytest.OpenPublisher(t, u) },
		NewSubscriber: func(t testing.TB, _ string) relay.Subscriber { return relaytest.OpenSubscriber(t, u) },
	})
}
