package amqp_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/amqp"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// hangGuard bounds each call on a hung broker: far above the 1s ctx the
// calls get, far below "waits for a heartbeat timeout or forever".
const hangGuard = 20 * time.Second

// throughProxy returns the test broker's URL through a fault proxy, with
// kv added, and the proxy.
func throughProxy(t *testing.T, kv ...string) (string, *testenv.FaultProxy) {
	t.Helper()
	u, err := url.Parse(brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	fp := testenv.NewFaultProxy(t, u.Host)
	u.Host = fp.Addr()
	// Redial quickly once the proxy is restored.
	kv = append([]string{"connect_timeout", "2s", "reconnect_max", "500ms"}, kv...)
	return testenv.WithParams(u.String(), kv...), fp
}

// within runs f and fails the test if it does not return within hangGuard.
func within(t *testing.T, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(hangGuard):
		t.Fatalf("%s did not return within %v on a hung broker", what, hangGuard)
		return nil
	}
}

func withTimeout(d time.Duration, f func(ctx context.Context) error) func() error {
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		return f(ctx)
	}
}

// Publish honours its ctx on a connection that stays open while the broker
// stops answering: opening a pooled channel and declaring a new topic's
// exchange are given up with the ctx, the connection is redialled, and
// publishing works again once the broker answers.
func TestHungBrokerPublish(t *testing.T) {
	c := newCleaner(t)
	topic, fresh := unique("hang-pub"), unique("hang-pub-new")
	direct := openSub(t, c, unique("g"))
	relaytest.Provision(t, direct, topic)
	relaytest.Provision(t, direct, fresh)

	u, fp := throughProxy(t)
	pub := openPubCfg(t, parse(t, u))
	relaytest.Publish(t, pub, topic, relay.NewMessage([]byte("before")))

	fp.Hang()
	// Three calls: the pool's two channels (one not opened yet) and a topic
	// whose exchange this connection has not declared.
	for i, tp := range []string{topic, topic, fresh} {
		err := within(t, "Publish", withTimeout(time.Second, func(ctx context.Context) error {
			return pub.Publish(ctx, tp, relay.NewMessage([]byte("hung")))
		}))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Publish %d on a hung broker = %v, want context.DeadlineExceeded", i, err)
		}
	}

	fp.Restore()
	after := relay.NewMessage([]byte("after"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pub.Publish(ctx, fresh, after); err != nil {
		t.Fatalf("Publish after the broker answers again: %v", err)
	}
	if pub.State() != amqp.StateConnected {
		t.Errorf("state %v after a successful publish", pub.State())
	}
	ch, _ := relaytest.Subscribe(t, direct, fresh)
	for {
		got := relaytest.Next(t, ch, "message published after the hang")
		_ = got.Ack()
		if got.ID == after.ID {
			break
		}
	}
	if err := within(t, "Close", pub.Close); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// Subscribe and Provision honour their ctx on a hung broker, and work again
// once it answers.
func TestHungBrokerSubscribeProvision(t *testing.T) {
	c := newCleaner(t)
	topic, other := unique("hang-sub"), unique("hang-prov")
	group := unique("g")
	u, fp := throughProxy(t, "group", group)
	sub := openSubCfg(t, c, parse(t, u))
	relaytest.Provision(t, sub, topic)
	c.pair(other, group)

	fp.Hang()
	err := within(t, "Subscribe", withTimeout(time.Second, func(ctx context.Context) error {
		_, err := sub.Subscribe(ctx, topic)
		return err
	}))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Subscribe on a hung broker = %v, want context.DeadlineExceeded", err)
	}
	err = within(t, "Provision", withTimeout(time.Second, func(ctx context.Context) error {
		return sub.Provision(ctx, other)
	}))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Provision on a hung broker = %v, want context.DeadlineExceeded", err)
	}

	fp.Restore()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sub.Provision(ctx, other); err != nil {
		t.Fatalf("Provision after the broker answers again: %v", err)
	}
	ch, _ := relaytest.Subscribe(t, sub, topic)
	m := relay.NewMessage([]byte("after"))
	relaytest.Publish(t, openPub(t), topic, m)
	if got := relaytest.Next(t, ch, "message after the hang"); got.ID != m.ID {
		t.Errorf("got %s, want %s", got.ID, m.ID)
	}
}

// Close returns on a hung broker, with a subscription holding an unsettled
// message and a publisher that has published (see docs/amqp.md for the
// bound).
func TestHungBrokerClose(t *testing.T) {
	c := newCleaner(t)
	topic := unique("hang-close")
	group := unique("g")
	u, fp := throughProxy(t, "group", group)
	sub := openSubCfg(t, c, parse(t, u))
	pub := openPubCfg(t, parse(t, u))
	relaytest.Provision(t, sub, topic)
	ch, _ := relaytest.Subscribe(t, sub, topic)
	relaytest.Publish(t, pub, topic, relay.NewMessage([]byte("held")), relay.NewMessage([]byte("acked")))
	_ = relaytest.Next(t, ch, "held message")
	_ = relaytest.Next(t, ch, "acked message").Ack()

	fp.Hang()
	if err := within(t, "Publisher.Close", pub.Close); err != nil {
		t.Logf("Publisher.Close: %v", err)
	}
	if err := within(t, "Subscriber.Close", sub.Close); err != nil {
		t.Logf("Subscriber.Close: %v", err)
	}
	if _, ok := <-ch; ok {
		t.Error("subscription channel delivered after Close")
	}
}

// stallProxy forwards TCP connections to upstream; after stall it stops
// reading from both sides, as a peer whose host froze: the client's writes
// block once the socket buffers are full (testenv.FaultProxy buffers far
// more than any message).
type stallProxy struct {
	ln      net.Listener
	stalled chan struct{} // closed by stall
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn
}

func newStallProxy(t *testing.T, upstream string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, stalled: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			p.wg.Add(2)
			go p.pipe(c, u)
			go p.pipe(u, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *stallProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-p.stalled:
			return // reads nothing more; the sockets stay open until cleanup
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *stallProxy) stall() { close(p.stalled) }

// Publish honours its ctx when the broker stops reading and the write of a
// large message blocks on full socket buffers: the writer abandons the
// connection, which ends the write, and a Publish waiting for the channel
// behind a blocked writer stops waiting. A Publish without deadline does
// not hold Close up beyond its grace. The heartbeat is long here, so that
// the client library's own timeout cannot be what ends them.
func TestStalledBrokerPublishWrite(t *testing.T) {
	c := newCleaner(t)
	topic := unique("stall-pub")
	relaytest.Provision(t, openSub(t, c, unique("g")), topic)
	u, err := url.Parse(brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	p := newStallProxy(t, u.Host)
	u.Host = p.ln.Addr().String()
	pub := openPubCfg(t, parse(t, testenv.WithParams(u.String(), "heartbeat", "60s", "publish_channels", "1")))
	relaytest.Publish(t, pub, topic, relay.NewMessage([]byte("before")))

	p.stall()
	big := func(ctx context.Context) error {
		return pub.Publish(ctx, topic, relay.NewMessage(make([]byte, 15<<20)))
	}
	// Usually the writer that blocks; otherwise the next call is.
	background := make(chan error, 1)
	go func() { background <- big(context.Background()) }()
	for i := range 2 {
		err = within(t, "Publish", withTimeout(time.Second, big))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Publish %d on a stalled broker = %v, want context.DeadlineExceeded", i, err)
		}
	}
	if err := within(t, "Close", pub.Close); err != nil {
		t.Logf("Close: %v", err)
	}
	if err := <-background; err == nil {
		t.Error("Publish without deadline on a stalled broker succeeded")
	}
}
