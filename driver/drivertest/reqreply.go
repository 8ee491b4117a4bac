package drivertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/reqreply"
	"github.com/go-relay/relay/router"
)

// RunRequestReply runs the request/reply checks (package reqreply) as
// subtests of t: 64 concurrent requests answered with the right payloads; a
// request to a topic whose server is down ends with
// context.DeadlineExceeded and leaves nothing pending; a reply that comes
// after its caller gave up is counted in Stats().Late and dropped; a
// handler's error arrives as a *reqreply.RemoteError; a message requested
// twice, and a reply message returned twice, still give a reply per call.
// Each subtest checks for goroutine leaks.
func RunRequestReply(t *testing.T, h Harness) {
	h.defaults(t)
	e := &env{h: &h}
	for _, c := range []check{
		{"Concurrent", "64 concurrent requests from one requester, each answered with its own payload and metadata, each sent under its correlation ID", rrConcurrent},
		{"NoServer", "a request to a topic whose server is down fails with context.DeadlineExceeded; nothing stays pending", rrNoServer},
		{"LateReply", "a reply after the caller gave up is counted in Stats().Late and not delivered to a later request", rrLate},
		{"RemoteError", "a handler error arrives as a *reqreply.RemoteError carrying the server's text", rrRemoteError},
		{"SameMessageTwice", "one message requested twice, and a handler that answers with one reply message, still give a reply per call (on brokers that drop a repeated ID too)", rrSameMessageTwice},
	} {
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

// rrServer runs a router serving topic with fn until t ends.
func rrServer(t *testing.T, e *env, topic string, fn reqreply.Func) {
	t.Helper()
	sub := e.sub(t, e.h.NewGroup(t))
	provision(t, sub, topic)
	pub := e.pub(t)
	r, err := router.New(router.Config{CloseTimeout: 10 * time.Second, RedeliveryDelay: router.ExponentialRedelivery(50*time.Millisecond, time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.AddHandler("reqreply-server", sub, topic, reqreply.Handler(pub, fn), router.WithConcurrency(16)); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- r.Run(context.Background()) }()
	select {
	case <-r.Running():
	case err := <-errc:
		t.Fatalf("router: %v", err)
	}
	t.Cleanup(func() {
		_ = r.Close()
		if err := <-errc; err != nil {
			t.Errorf("router: %v", err)
		}
	})
}

func rrRequester(t *testing.T, e *env) *reqreply.Requester {
	t.Helper()
	pub := e.pub(t)
	sub := e.sub(t, e.h.NewGroup(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := reqreply.NewRequester(ctx, pub, sub)
	if err != nil {
		t.Fatalf("NewRequester: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Requester.Close: %v", err)
		}
	})
	return r
}

func echo(_ context.Context, req *relay.Message) (*relay.Message, error) {
	rep := relay.NewMessage(append([]byte("echo:"), req.Payload...))
	rep.Metadata = relay.Metadata{"seen-id": req.ID}
	return rep, nil
}

func rrConcurrent(t *testing.T, e *env) {
	topic := e.h.NewTopic(t)
	rrServer(t, e, topic, echo)
	r := rrRequester(t, e)
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, 2*n) // at most two per request
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), e.h.ReceiveTimeout+30*time.Second)
			defer cancel()
			req := relay.NewMessage([]byte(fmt.Sprintf("request %d", i)))
			rep, err := r.Request(ctx, topic, req)
			if err != nil {
				errs <- fmt.Errorf("request %d: %w", i, err)
				return
			}
			if want := "echo:" + string(req.Payload); string(rep.Payload) != want {
				errs <- fmt.Errorf("request %d: reply %q, want %q", i, rep.Payload, want)
			}
			// Each request goes out under its correlation ID, which the
			// reply carries back.
			if got, corr := rep.Metadata.Get("seen-id"), rep.Metadata.Get(reqreply.CorrelationIDKey); got == "" || got != corr {
				errs <- fmt.Errorf("request %d: the server saw ID %q, want the correlation ID %q", i, got, corr)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := r.Stats()
	if st.Sent != n || st.Answered != n || st.InFlight != 0 || st.Late != 0 {
		t.Errorf("Stats %+v, want Sent=Answered=%d, InFlight=0, Late=0", st, n)
	}
	t.Logf("%d concurrent requests answered; reply topic %q; stats %+v", n, r.ReplyTopic(), st)
	if topic := r.ReplyTopic(); topic != "" && e.h.TopicExists != nil {
		if !e.h.TopicExists(t, topic) {
			t.Errorf("reply topic %q not found on the broker while the requester is open", topic)
		}
		if err := r.Close(); err != nil {
			t.Fatalf("Requester.Close: %v", err)
		}
		if e.h.TopicExists(t, topic) {
			t.Errorf("reply topic %q still on the broker after Close", topic)
		} else {
			t.Logf("Close removed reply topic %q", topic)
		}
	}
}

func rrNoServer(t *testing.T, e *env) {
	topic := e.h.NewTopic(t)
	// The server's group exists (it ran once) but no server is running.
	provision(t, e.sub(t, e.h.NewGroup(t)), topic)
	r := rrRequester(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := r.Request(ctx, topic, relay.NewMessage([]byte("anyone?")))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Request with no server = %v, want context.DeadlineExceeded", err)
	}
	st := r.Stats()
	if st.InFlight != 0 || st.TimedOut != 1 || st.Answered != 0 {
		t.Errorf("Stats %+v, want InFlight=0, TimedOut=1, Answered=0", st)
	}
	t.Logf("no server: %v", err)
}

func rrLate(t *testing.T, e *env) {
	topic := e.h.NewTopic(t)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	held := make(chan struct{}, 1)
	rrServer(t, e, topic, func(ctx context.Context, req *relay.Message) (*relay.Message, error) {
		if bytes.HasPrefix(req.Payload, []byte("hold")) {
			held <- struct{}{}
			<-release
		}
		return echo(ctx, req)
	})
	r := rrRequester(t, e)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-held: // the server has the request: give up now
		case <-time.After(e.h.ReceiveTimeout + 30*time.Second):
		}
		cancel()
	}()
	_, err := r.Request(ctx, topic, relay.NewMessage([]byte("hold")))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Request given up = %v, want context.Canceled", err)
	}
	once.Do(func() { close(release) })
	deadline := time.Now().Add(e.h.ReceiveTimeout)
	for r.Stats().Late == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st := r.Stats(); st.Late != 1 || st.InFlight != 0 {
		t.Fatalf("Stats %+v after the late reply, want Late=1, InFlight=0", st)
	}
	// The next request gets its own reply, not the late one.
	rctx, rcancel := context.WithTimeout(context.Background(), e.h.ReceiveTimeout+30*time.Second)
	defer rcancel()
	rep, err := r.Request(rctx, topic, relay.NewMessage([]byte("next")))
	if err != nil {
		t.Fatalf("Request after the late reply: %v", err)
	}
	if string(rep.Payload) != "echo:next" {
		t.Errorf("reply %q, want %q", rep.Payload, "echo:next")
	}
	t.Logf("late reply counted and dropped; stats %+v", r.Stats())
}

func rrRemoteError(t *testing.T, e *env) {
	topic := e.h.NewTopic(t)
	rrServer(t, e, topic, func(ctx context.Context, req *relay.Message) (*relay.Message, error) {
		if s, ok := strings.CutPrefix(string(req.Payload), "fail "); ok {
			return nil, fmt.Errorf("no such order %s", s)
		}
		return echo(ctx, req)
	})
	r := rrRequester(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), e.h.ReceiveTimeout+30*time.Second)
	defer cancel()
	_, err := r.Request(ctx, topic, relay.NewMessage([]byte("fail 42")))
	var re *reqreply.RemoteError
	if !errors.As(err, &re) {
		t.Fatalf("Request to a failing handler = %v (%T), want *reqreply.RemoteError", err, err)
	}
	if re.Message != "no such order 42" {
		t.Errorf("RemoteError.Message %q, want %q", re.Message, "no such order 42")
	}
	rep, err := r.Request(ctx, topic, relay.NewMessage([]byte("ok")))
	if err != nil || string(rep.Payload) != "echo:ok" {
		t.Errorf("Request after a remote error = %v, %v; want echo:ok", rep, err)
	}
	if st := r.Stats(); st.RemoteErrors != 1 || st.Answered != 2 {
		t.Errorf("Stats %+v, want RemoteErrors=1, Answered=2", st)
	}
	t.Logf("remote error: %v", re)
}

// rrSameMessageTwice: Request called twice with one message (a caller's
// retry), answered by a handler that returns one reply message every
// time, gets a reply each time: every request and every reply goes out
// under an ID of its own, so a broker that drops a repeated ID (NATS
// JetStream's duplicate window) keeps them all.
func rrSameMessageTwice(t *testing.T, e *env) {
	topic := e.h.NewTopic(t)
	canned := relay.NewMessage([]byte("the same reply"))
	var mu sync.Mutex
	seen := map[string]bool{}
	rrServer(t, e, topic, func(_ context.Context, req *relay.Message) (*relay.Message, error) {
		mu.Lock()
		seen[req.ID] = true
		mu.Unlock()
		return canned, nil
	})
	r := rrRequester(t, e)
	msg := relay.NewMessage([]byte("asked twice"))
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), e.h.ReceiveTimeout+10*time.Second)
		rep, err := r.Request(ctx, topic, msg)
		cancel()
		if err != nil {
			t.Fatalf("request %d of one message: %v", i+1, err)
		}
		if string(rep.Payload) != "the same reply" {
			t.Errorf("request %d: reply %q", i+1, rep.Payload)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Errorf("the server saw request IDs %v, want two different ones", seen)
	}
}
