package amqp_test

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/amqp"
	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/testenv"
	"github.com/go-relay/relay/reqreply"
	"github.com/go-relay/relay/router"
)

// TestRequestReply runs the request/reply conformance checks: on amqp://
// the requester uses direct reply-to.
func TestRequestReply(t *testing.T) {
	drivertest.RunRequestReply(t, harness(t, newCleaner(t)))
}

func rrPub(t *testing.T) *amqp.Publisher {
	t.Helper()
	p, err := relay.OpenPublisher(context.Background(), brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p.(*amqp.Publisher)
}

func rrRawChannel(t *testing.T) *amqp091.Channel {
	t.Helper()
	conn, err := amqp091.Dial(brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// TestRequestReplyDirect checks that the requester uses direct reply-to:
// no reply topic, and the request a server sees carries the broker's
// per-channel address in reply_to.
func TestRequestReplyDirect(t *testing.T) {
	r, err := reqreply.NewRequester(context.Background(), rrPub(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.ReplyTopic() != "" {
		t.Errorf("ReplyTopic() = %q on amqp://, want \"\" (direct reply-to)", r.ReplyTopic())
	}
}

// TestInteropRawClient: a plain amqp091 client that sets reply_to (direct
// reply-to) and correlation_id is answered by a relay server.
func TestInteropRawClient(t *testing.T) {
	c := newCleaner(t)
	topic, group := unique("rr-raw-client"), unique("srv")
	c.pair(topic, group)
	sub, err := relay.OpenSubscriber(context.Background(), brokerURL(t)+"?group="+group)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.(relay.Provisioner).Provision(context.Background(), topic); err != nil {
		t.Fatal(err)
	}
	pub := rrPub(t)
	rt, err := router.New(router.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.AddHandler("srv", sub, topic, reqreply.Handler(pub, func(_ context.Context, req *relay.Message) (*relay.Message, error) {
		return &relay.Message{Payload: append([]byte("hello "), req.Payload...)}, nil
	})); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rt.Run(context.Background()) }()
	defer func() { _ = rt.Close(); <-done }()
	<-rt.Running()

	ch := rrRawChannel(t)
	replies, err := ch.Consume("amq.rabbitmq.reply-to", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = ch.PublishWithContext(context.Background(), topic, "", false, false, amqp091.Publishing{
		ReplyTo: "amq.rabbitmq.reply-to", CorrelationId: "raw-corr-1", Body: []byte("raw"),
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-replies:
		if d.CorrelationId != "raw-corr-1" || string(d.Body) != "hello raw" {
			t.Errorf("raw client got correlation_id %q body %q, want raw-corr-1, %q", d.CorrelationId, d.Body, "hello raw")
		}
		if _, ok := d.Headers[reqreply.CorrelationIDKey]; ok {
			t.Errorf("the correlation ID travelled as a header too: %v", d.Headers)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("raw client: no reply")
	}
}

// TestInteropRawServer: a plain amqp091 server that copies correlation_id
// and publishes to reply_to answers a relay requester.
func TestInteropRawServer(t *testing.T) {
	c := newCleaner(t)
	topic := unique("rr-raw-server")
	c.topic(topic)
	ch := rrRawChannel(t)
	if err := ch.ExchangeDeclare(topic, "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, "", topic, false, nil); err != nil {
		t.Fatal(err)
	}
	reqs, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan amqp091.Delivery, 4)
	go func() {
		for d := range reqs {
			seen <- d
			_ = ch.PublishWithContext(context.Background(), "", d.ReplyTo, false, false, amqp091.Publishing{
				CorrelationId: d.CorrelationId, Body: append([]byte("raw says "), d.Body...),
			})
		}
	}()
	r, err := reqreply.NewRequester(context.Background(), rrPub(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := r.Request(ctx, topic, relay.NewMessage([]byte("hi")))
	if err != nil {
		t.Fatalf("Request to a raw server: %v", err)
	}
	if string(rep.Payload) != "raw says hi" {
		t.Errorf("reply %q, want %q", rep.Payload, "raw says hi")
	}
	d := <-seen
	if len(d.ReplyTo) <= len(amqp.DirectReplyTo) || d.CorrelationId == "" {
		t.Errorf("raw server saw reply_to %q correlation_id %q: want the broker's direct reply-to address and an ID", d.ReplyTo, d.CorrelationId)
	}
	if rep.Metadata.Get(reqreply.CorrelationIDKey) != d.CorrelationId {
		t.Errorf("reply correlation %q, request's %q", rep.Metadata.Get(reqreply.CorrelationIDKey), d.CorrelationId)
	}
}

// TestReplyToGoneRequester: a reply to a direct reply-to address whose
// requester is gone is accepted (the broker drops it), so the server does
// not redeliver the request forever.
func TestReplyToGoneRequester(t *testing.T) {
	pub := rrPub(t)
	err := pub.Publish(context.Background(), amqp.DirectReplyTo+".g1h2AA1yZXBseUA5MjQ4ODg0AAADDgAAAABrDvmu.NyJnYzgHtaWAmLbBIPgSfg==", relay.NewMessage([]byte("late")))
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Publish to a gone requester's address = %v, want nil", err)
	}
}

// TestRemoveTopic: RemoveTopic deletes the group's queue and the unused
// exchange, and is idempotent.
func TestRemoveTopic(t *testing.T) {
	topic, group := unique("rr-remove"), unique("g")
	sub, err := relay.OpenSubscriber(context.Background(), brokerURL(t)+"?group="+group)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.(relay.Provisioner).Provision(context.Background(), topic); err != nil {
		t.Fatal(err)
	}
	remover := sub.(reqreply.TopicRemover)
	for i := 0; i < 2; i++ {
		if err := remover.RemoveTopic(context.Background(), topic); err != nil {
			t.Fatalf("RemoveTopic #%d: %v", i+1, err)
		}
	}
	ch := rrRawChannel(t)
	if _, err := ch.QueueDeclarePassive(topic+"."+group, true, false, false, false, nil); err == nil {
		t.Errorf("queue %s.%s still exists", topic, group)
	}
	ch = rrRawChannel(t)
	if err := ch.ExchangeDeclarePassive(topic, "fanout", true, false, false, false, nil); err == nil {
		t.Errorf("exchange %s still exists", topic)
	}
}

// TestRequestNoQueue: on amqp:// a request to a topic that no group's
// queue is bound to fails at once with ErrUnroutable (mandatory publish)
// instead of waiting for its deadline, and leaves nothing pending.
func TestRequestNoQueue(t *testing.T) {
	c := newCleaner(t)
	topic := unique("rr-no-queue")
	c.topic(topic)
	r, err := reqreply.NewRequester(context.Background(), rrPub(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Request(context.Background(), topic, relay.NewMessage([]byte("x")))
	if !errors.Is(err, amqp.ErrUnroutable) {
		t.Fatalf("Request to a topic without queue = %v, want ErrUnroutable", err)
	}
	if st := r.Stats(); st.InFlight != 0 || st.Sent != 0 {
		t.Errorf("Stats %+v, want nothing sent or pending", st)
	}
}

// TestDirectReplyReconnect: after the requester's connection is cut, the
// next request opens a new direct reply-to channel on the new connection
// and is answered.
func TestDirectReplyReconnect(t *testing.T) {
	c := newCleaner(t)
	topic, group := unique("rr-reconnect"), unique("srv")
	c.pair(topic, group)
	sub, err := relay.OpenSubscriber(context.Background(), brokerURL(t)+"?group="+group)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.(relay.Provisioner).Provision(context.Background(), topic); err != nil {
		t.Fatal(err)
	}
	srvPub := rrPub(t)
	rt, err := router.New(router.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.AddHandler("srv", sub, topic, reqreply.Handler(srvPub, func(_ context.Context, req *relay.Message) (*relay.Message, error) {
		return &relay.Message{Payload: req.Payload}, nil
	})); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rt.Run(context.Background()) }()
	defer func() { _ = rt.Close(); <-done }()
	<-rt.Running()

	proxied, proxy := testenv.ProxyURL(t, brokerURL(t))
	p, err := relay.OpenPublisher(context.Background(), proxied)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	r, err := reqreply.NewRequester(context.Background(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ask := func(what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rep, err := r.Request(ctx, topic, relay.NewMessage([]byte(what)))
		if err != nil || string(rep.Payload) != what {
			t.Fatalf("Request(%q) = %v, %v", what, rep, err)
		}
	}
	ask("before")
	proxy.Cut()
	proxy.Uncut()
	ask("after") // Publish waits for the reconnect, then a new channel
	if st := r.Stats(); st.Answered != 2 || st.InFlight != 0 {
		t.Errorf("Stats %+v, want Answered=2 InFlight=0", st)
	}
}
