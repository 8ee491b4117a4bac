package reqreply_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/memory"
	"github.com/go-relay/relay/reqreply"
)

// childMain, when set (by the faults build), runs instead of the tests in
// a re-executed test binary whose environment has childEnv.
var childMain func() int

const childEnv = "RELAY_REQREPLY_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" && childMain != nil {
		os.Exit(childMain())
	}
	goleak.VerifyTestMain(m)
}

// removeRecorder records the topics a requester removes.
type removeRecorder struct {
	relay.Subscriber
	mu      sync.Mutex
	removed []string
}

func (r *removeRecorder) Provision(ctx context.Context, topic string) error {
	return r.Subscriber.(relay.Provisioner).Provision(ctx, topic)
}

func (r *removeRecorder) RemoveTopic(ctx context.Context, topic string) error {
	r.mu.Lock()
	r.removed = append(r.removed, topic)
	r.mu.Unlock()
	return r.Subscriber.(reqreply.TopicRemover).RemoveTopic(ctx, topic)
}

func memPair(t *testing.T, broker string) (relay.Publisher, *removeRecorder) {
	t.Helper()
	pub := memory.NewPublisher(broker, memory.PublisherConfig{})
	sub, err := memory.NewSubscriber(broker, memory.SubscriberConfig{Group: "requester"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close(); _ = sub.Close() })
	return pub, &removeRecorder{Subscriber: sub}
}

// TestCancelAndClose: a cancelled request leaves nothing pending; Close
// fails the request in flight with ErrClosed and removes the reply topic.
func TestCancelAndClose(t *testing.T) {
	pub, sub := memPair(t, t.Name())
	r, err := reqreply.NewRequester(context.Background(), pub, sub)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := r.Request(ctx, "nobody", relay.NewMessage([]byte("a")))
		done <- err
	}()
	for r.Stats().InFlight != 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Request = %v, want context.Canceled", err)
	}
	if st := r.Stats(); st.InFlight != 0 || st.TimedOut != 1 {
		t.Fatalf("Stats after cancel %+v, want InFlight=0 TimedOut=1", st)
	}
	go func() {
		_, err := r.Request(context.Background(), "nobody", relay.NewMessage([]byte("b")))
		done <- err
	}()
	for r.Stats().InFlight != 1 {
		time.Sleep(time.Millisecond)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, relay.ErrClosed) {
		t.Fatalf("Request in flight at Close = %v, want relay.ErrClosed", err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if _, err := r.Request(context.Background(), "nobody", relay.NewMessage(nil)); !errors.Is(err, relay.ErrClosed) {
		t.Errorf("Request after Close = %v, want relay.ErrClosed", err)
	}
	if len(sub.removed) != 1 || sub.removed[0] != r.ReplyTopic() {
		t.Errorf("removed %q, want [%q]", sub.removed, r.ReplyTopic())
	}
}

// TestRequestCopies: Request leaves the caller's message as it was and
// publishes the reply-to, correlation and deadline keys.
func TestRequestCopies(t *testing.T) {
	pub, sub := memPair(t, t.Name())
	srv, err := memory.NewSubscriber(t.Name(), memory.SubscriberConfig{Group: "server"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reqs, err := srv.Subscribe(ctx, "svc")
	if err != nil {
		t.Fatal(err)
	}
	r, err := reqreply.NewRequester(context.Background(), pub, sub, reqreply.WithDefaultTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	msg := &relay.Message{Payload: []byte("p"), Metadata: relay.Metadata{"a": "b"}}
	errc := make(chan error, 1)
	go func() {
		_, err := r.Request(context.Background(), "svc", msg)
		errc <- err
	}()
	got := <-reqs
	_ = got.Ack()
	if got.ID == "" || got.Metadata.Get(reqreply.ReplyToKey) != r.ReplyTopic() || got.Metadata.Get(reqreply.CorrelationIDKey) == "" ||
		got.Metadata.Get(reqreply.DeadlineKey) == "" || got.Metadata.Get("a") != "b" {
		t.Errorf("published request ID %q metadata %q", got.ID, got.Metadata)
	}
	if msg.ID != "" || len(msg.Metadata) != 1 {
		t.Errorf("the caller's message changed: ID %q metadata %q", msg.ID, msg.Metadata)
	}
	// A hand-made reply with the correlation ID answers it.
	rep := relay.NewMessage([]byte("r"))
	rep.Metadata = relay.Metadata{reqreply.CorrelationIDKey: got.Metadata.Get(reqreply.CorrelationIDKey)}
	if err := pub.Publish(context.Background(), r.ReplyTopic(), rep); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestHandler(t *testing.T) {
	pub, sub := memPair(t, t.Name())
	calls := 0
	h := reqreply.Handler(pub, func(context.Context, *relay.Message) (*relay.Message, error) {
		calls++
		return relay.NewMessage([]byte("x")), nil
	})
	_, err := h(context.Background(), relay.NewMessage(nil))
	if !errors.Is(err, reqreply.ErrNoReplyTo) || calls != 0 {
		t.Errorf("request without reply-to: %v after %d calls, want ErrNoReplyTo and no call", err, calls)
	}
	// A request whose deadline has passed is skipped.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := sub.Provision(ctx, "replies"); err != nil {
		t.Fatal(err)
	}
	replies, err := sub.Subscribe(ctx, "replies")
	if err != nil {
		t.Fatal(err)
	}
	expired := relay.NewMessage(nil)
	expired.Metadata = relay.Metadata{reqreply.ReplyToKey: "replies", reqreply.CorrelationIDKey: "c1",
		reqreply.DeadlineKey: time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)}
	if out, err := h(context.Background(), expired); err != nil || out != nil || calls != 0 {
		t.Errorf("expired request: %v, %v after %d calls; want skipped", out, err, calls)
	}
	live := relay.NewMessage(nil)
	live.Metadata = relay.Metadata{reqreply.ReplyToKey: "replies", reqreply.CorrelationIDKey: "c2",
		reqreply.DeadlineKey: time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano)}
	if _, err := h(context.Background(), live); err != nil || calls != 1 {
		t.Fatalf("live request: %v after %d calls", err, calls)
	}
	rep := <-replies
	_ = rep.Ack()
	if rep.Metadata.Get(reqreply.CorrelationIDKey) != "c2" || string(rep.Payload) != "x" {
		t.Errorf("reply %q metadata %q, want x with correlation c2", rep.Payload, rep.Metadata)
	}
}

func TestNewRequesterNeedsSubscriber(t *testing.T) {
	pub, _ := memPair(t, t.Name())
	if _, err := reqreply.NewRequester(context.Background(), pub, nil); err == nil {
		t.Error("NewRequester without direct reply channel or subscriber succeeded")
	}
}
