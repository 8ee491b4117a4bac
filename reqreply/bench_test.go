package reqreply_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/amqp"
	_ "github.com/go-relay/relay/adapters/redisstream"
	"github.com/go-relay/relay/internal/testkit/testenv"
	"github.com/go-relay/relay/reqreply"
	"github.com/go-relay/relay/router"
)

// roundTrips runs b.N calls of call with inflight callers at once and
// reports round trips per second and the p50/p99 latency in µs.
func roundTrips(b *testing.B, inflight int, call func(ctx context.Context, i int) error) float64 {
	b.Helper()
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < inflight; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				t0 := time.Now()
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				err := call(cctx, i)
				cancel()
				lat[i] = time.Since(t0)
				if err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	rate := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(rate, "rt/s")
	b.ReportMetric(float64(lat[b.N/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[min(b.N-1, b.N*99/100)].Microseconds()), "p99-µs")
	b.ReportMetric(0, "ns/op") // rt/s says it better
	return rate
}

// relayEcho starts a router serving topic with an echo handler on the
// publisher and subscriber opened from pubURL and subURL, and returns a
// requester; everything is closed when b ends.
func relayEcho(b *testing.B, pubURL, subURL func(group string) string) (*reqreply.Requester, string) {
	b.Helper()
	ctx := context.Background()
	topic := "rr-bench-" + relay.NewID()[24:]
	pub, err := relay.OpenPublisher(ctx, pubURL(""))
	if err != nil {
		b.Fatal(err)
	}
	srv, err := relay.OpenSubscriber(ctx, subURL("server"))
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.(relay.Provisioner).Provision(ctx, topic); err != nil {
		b.Fatal(err)
	}
	rt, err := router.New(router.Config{})
	if err != nil {
		b.Fatal(err)
	}
	echo := func(_ context.Context, m *relay.Message) (*relay.Message, error) {
		return &relay.Message{Payload: m.Payload}, nil
	}
	if err := rt.AddHandler("echo", srv, topic, reqreply.Handler(pub, echo), router.WithConcurrency(64)); err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	<-rt.Running()
	rsub, err := relay.OpenSubscriber(ctx, subURL("requester"))
	if err != nil {
		b.Fatal(err)
	}
	r, err := reqreply.NewRequester(ctx, pub, rsub)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = r.Close()
		_ = rt.Close()
		<-done
		if tr, ok := srv.(reqreply.TopicRemover); ok {
			_ = tr.RemoveTopic(ctx, topic)
		}
		_ = rsub.Close()
		_ = srv.Close()
		_ = pub.Close()
	})
	return r, topic
}

func benchRelay(b *testing.B, pubURL, subURL func(string) string) {
	r, topic := relayEcho(b, pubURL, subURL)
	payload := []byte("ping")
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprintf("inflight=%d", n), func(b *testing.B) {
			roundTrips(b, n, func(ctx context.Context, _ int) error {
				_, err := r.Request(ctx, topic, relay.NewMessage(payload))
				return err
			})
		})
	}
}

func group(base string) func(string) string {
	return func(g string) string {
		if g == "" {
			return base
		}
		return testenv.WithParams(base, "group", g)
	}
}

// BenchmarkMemory is request/reply round trips on mem://.
func BenchmarkMemory(b *testing.B) {
	base := "mem://rr-bench-" + relay.NewID()[24:]
	benchRelay(b, group(base), group(base))
}

// BenchmarkRedis is request/reply round trips on redis:// (a reply stream).
func BenchmarkRedis(b *testing.B) {
	base := testenv.Redis(b)
	benchRelay(b, group(base), group(base))
}

// BenchmarkAMQP compares relay's request/reply on amqp:// (direct
// reply-to; requests persistent, mandatory and confirmed into a durable
// queue; replies confirmed; requests acked by the server after the reply)
// with two loops written with amqp091-go alone, both on direct reply-to:
// "raw" (transient requests to an exclusive queue, no confirms, auto-ack)
// and "raw-confirmed" (relay's guarantees: persistent requests to a durable
// queue with confirms, confirmed replies, manual acks). The three run one
// after the other for each in-flight count, amqpRounds times, and each raw
// sub-benchmark reports relay's rate of the same round as a fraction of
// its own (relay/raw).
func BenchmarkAMQP(b *testing.B) {
	base := testenv.AMQP(b)
	r, topic := relayEcho(b, group(base), group(base))
	raw := newRawAMQP(b, base, false)
	confirmed := newRawAMQP(b, base, true)
	payload := []byte("ping")
	for round := 0; round < amqpRounds; round++ {
		for _, n := range []int{1, 64} {
			var relayRate float64
			b.Run(fmt.Sprintf("relay/inflight=%d", n), func(b *testing.B) {
				relayRate = roundTrips(b, n, func(ctx context.Context, _ int) error {
					_, err := r.Request(ctx, topic, relay.NewMessage(payload))
					return err
				})
			})
			for _, rw := range []*rawAMQP{raw, confirmed} {
				b.Run(fmt.Sprintf("%s/inflight=%d", rw.name, n), func(b *testing.B) {
					rawRate := roundTrips(b, n, func(ctx context.Context, i int) error { return rw.request(ctx, payload) })
					if relayRate > 0 {
						b.ReportMetric(relayRate/rawRate, "relay/raw")
					}
				})
			}
		}
	}
}

// amqpRounds is how many times BenchmarkAMQP runs each of its
// sub-benchmarks, interleaved.
const amqpRounds = 3

// rawAMQP is a request/reply pair written with amqp091-go alone: a server
// consuming a queue and publishing to reply_to, a client on direct
// reply-to. With confirmed, requests are persistent and confirmed into a
// durable queue, replies are confirmed and the server acks a request after
// its reply was confirmed.
type rawAMQP struct {
	name      string
	confirmed bool
	mu        sync.Mutex // guards pending
	ch        *amqp091.Channel
	queue     string
	pending   map[string]chan struct{}
	seq       atomic.Uint64
}

func newRawAMQP(b *testing.B, u string, confirmed bool) *rawAMQP {
	b.Helper()
	conn, err := amqp091.Dial(u)
	if err != nil {
		b.Fatal(err)
	}
	srvCh, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	r := &rawAMQP{name: "raw", confirmed: confirmed, pending: map[string]chan struct{}{}}
	name, durable, exclusive := "", false, true
	if confirmed {
		r.name = "raw-confirmed"
		name, durable, exclusive = "rr-bench-raw-"+relay.NewID()[24:], true, false
		if err := srvCh.Confirm(false); err != nil {
			b.Fatal(err)
		}
		if err := srvCh.Qos(64, 0, false); err != nil {
			b.Fatal(err)
		}
	}
	q, err := srvCh.QueueDeclare(name, durable, !durable, exclusive, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	r.queue = q.Name
	reqs, err := srvCh.Consume(q.Name, "", !confirmed, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for d := range reqs {
			reply := amqp091.Publishing{CorrelationId: d.CorrelationId, Body: d.Body}
			if !confirmed {
				_ = srvCh.Publish("", d.ReplyTo, false, false, reply)
				continue
			}
			go func() {
				dc, err := srvCh.PublishWithDeferredConfirm("", d.ReplyTo, false, false, reply)
				if err == nil {
					dc.Wait()
				}
				_ = d.Ack(false)
			}()
		}
	}()
	r.ch, err = conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if confirmed {
		if err := r.ch.Confirm(false); err != nil {
			b.Fatal(err)
		}
	}
	replies, err := r.ch.Consume(amqp.DirectReplyTo, "", true, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for d := range replies {
			r.mu.Lock()
			if c, ok := r.pending[d.CorrelationId]; ok {
				delete(r.pending, d.CorrelationId)
				close(c)
			}
			r.mu.Unlock()
		}
	}()
	b.Cleanup(func() {
		if confirmed {
			_, _ = srvCh.QueueDelete(q.Name, false, false, false)
		}
		_ = conn.Close()
		wg.Wait()
	})
	return r
}

func (r *rawAMQP) request(ctx context.Context, body []byte) error {
	corr := fmt.Sprint(r.seq.Add(1))
	c := make(chan struct{})
	r.mu.Lock()
	r.pending[corr] = c
	r.mu.Unlock()
	p := amqp091.Publishing{ReplyTo: amqp.DirectReplyTo, CorrelationId: corr, Body: body}
	if !r.confirmed {
		if err := r.ch.PublishWithContext(ctx, "", r.queue, false, false, p); err != nil {
			return err
		}
	} else {
		p.DeliveryMode = amqp091.Persistent
		dc, err := r.ch.PublishWithDeferredConfirmWithContext(ctx, "", r.queue, true, false, p)
		if err != nil {
			return err
		}
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			return fmt.Errorf("raw request not confirmed: %v", err)
		}
	}
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
