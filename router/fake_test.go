package router_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeSub is a Subscriber whose deliveries and settlements the test sees.
type fakeSub struct {
	in chan *relay.Message

	mu       sync.Mutex
	ended    bool
	settled  map[string]driver.Settlement
	order    []string // "ack:ID", "nack:ID"
	closes   int
	subErr   error
	subCtx   context.Context
	subEnded chan struct{}
	changed  chan struct{}
}

func newFakeSub() *fakeSub {
	return &fakeSub{in: make(chan *relay.Message), settled: map[string]driver.Settlement{}, subEnded: make(chan struct{}), changed: make(chan struct{}, 1)}
}

func (f *fakeSub) Subscribe(ctx context.Context, topic string) (<-chan *relay.Message, error) {
	if f.subErr != nil {
		return nil, f.subErr
	}
	f.mu.Lock()
	f.subCtx = ctx
	f.mu.Unlock()
	out := make(chan *relay.Message)
	go func() {
		defer close(f.subEnded)
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				f.mu.Lock()
				f.ended = true
				f.mu.Unlock()
				return
			case m, ok := <-f.in:
				if !ok {
					return
				}
				select {
				case out <- m:
				case <-ctx.Done():
					f.mu.Lock()
					f.ended = true
					f.mu.Unlock()
					return
				}
			}
		}
	}()
	return out, nil
}

func (f *fakeSub) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closes++
	return nil
}

// deliver builds a delivered message settled into f's record.
func (f *fakeSub) msg(id, key string, attempt int) *relay.Message {
	m := &relay.Message{ID: id, Key: key, Payload: []byte(id)}
	return driver.Deliver(m, driver.DeliveryParams{
		Topic:   "in",
		Attempt: attempt,
		Ctx:     context.Background(),
		Settle: func(s driver.Settlement) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.ended {
				return relay.ErrSubscriptionEnded
			}
			f.settled[id] = s
			kind := "nack"
			if s.Ack {
				kind = "ack"
			}
			f.order = append(f.order, kind+":"+id)
			select {
			case f.changed <- struct{}{}:
			default:
			}
			return nil
		},
	})
}

// push delivers a message (blocks until the router takes it).
func (f *fakeSub) push(t *testing.T, m *relay.Message) {
	t.Helper()
	select {
	case f.in <- m:
	case <-time.After(10 * time.Second):
		t.Fatalf("router did not take message %s", m.ID)
	}
}

// waitSettled waits until id is settled and returns how.
func (f *fakeSub) waitSettled(t *testing.T, id string) driver.Settlement {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		f.mu.Lock()
		s, ok := f.settled[id]
		f.mu.Unlock()
		if ok {
			return s
		}
		select {
		case <-f.changed:
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatalf("message %s not settled", id)
		}
	}
}

func (f *fakeSub) events() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.order...)
}

// fakePub records publishes; fail makes Publish return an error.
type fakePub struct {
	mu     sync.Mutex
	fail   error
	msgs   map[string][]*relay.Message // topic → messages
	closes int
	closed bool
}

func newFakePub() *fakePub { return &fakePub{msgs: map[string][]*relay.Message{}} }

func (p *fakePub) Publish(ctx context.Context, topic string, msgs ...*relay.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return relay.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.fail != nil {
		return p.fail
	}
	p.msgs[topic] = append(p.msgs[topic], msgs...)
	return nil
}

func (p *fakePub) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closes++
	p.closed = true
	return nil
}

func (p *fakePub) published(topic string) []*relay.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*relay.Message(nil), p.msgs[topic]...)
}

func (p *fakePub) closeCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closes
}

// runRouter starts r.Run in the background and waits until it runs. The
// returned func closes the router and returns Run's error.
func runRouter(t *testing.T, r interface {
	Run(context.Context) error
	Running() <-chan struct{}
	Close() error
}) func() error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- r.Run(context.Background()) }()
	select {
	case <-r.Running():
	case err := <-errc:
		t.Fatalf("Run returned early: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("router did not start")
	}
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cerr := r.Close()
			runErr = <-errc
			if !errors.Is(cerr, runErr) && fmt.Sprint(cerr) != fmt.Sprint(runErr) {
				t.Errorf("Close returned %v, Run returned %v", cerr, runErr)
			}
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}
