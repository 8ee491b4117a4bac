package driver

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/go-relay/relay/driver/backoff"
)

// Mover runs the background loops of a driver that emulates delayed
// delivery inside its broker (Capabilities.DelayedDelivery is
// relay.DelayEmulated): the publisher puts a message due later in a place
// of the driver's own (a sorted set, a delay topic), and a loop per topic
// moves it to the topic once it is due. The Mover owns the loop: it
// starts one per key (a topic, a stream) with the first Acquire of the
// key, however many subscriptions of the subscriber need it, calls the
// key's MoveTask over and over, waits between calls as the task says,
// retries a failed call with backoff (from 100ms doubling to 5s,
// jittered) and stops the loop when the last holder lets go. The driver
// supplies only the broker calls, as a MoveTask.
//
// A Mover is safe for concurrent use. Its loops run until their last
// release, so a SubscribeDriver acquires a key in Subscribe and releases
// it in its Receiver's Close.
type Mover struct {
	open func(key string) (MoveTask, error)
	log  *slog.Logger

	mu      sync.Mutex
	running map[string]*moverLoop
}

// MoveTask is the broker side of one key's mover loop.
type MoveTask interface {
	// Move moves what is due once and returns how long the loop may wait
	// before the next call: until the earliest message left is due, at
	// most as long as a message published meanwhile may be late (0: call
	// again at once). It may wait for the broker itself (a poll) within
	// ctx, and returns soon after ctx is done, which is how the loop
	// stops. Its error is logged and the call made again after a backoff
	// delay. Move is called from one goroutine at a time.
	Move(ctx context.Context) (wait time.Duration, err error)
	// Close ends the task once its loop has stopped for good: it commits
	// what the task's state requires and releases its connections, giving
	// up on the broker when ctx is done.
	Close(ctx context.Context)
}

// NewMover returns a Mover whose loop for a key runs the MoveTask that
// open returns for it (open is called with the first Acquire of the key,
// under the Mover's lock). Failed moves are logged to log (slog.Default()
// when nil) with the key.
func NewMover(open func(key string) (MoveTask, error), log *slog.Logger) *Mover {
	if log == nil {
		log = slog.Default()
	}
	return &Mover{open: open, log: log, running: map[string]*moverLoop{}}
}

type moverLoop struct {
	refs   int
	task   MoveTask
	cancel context.CancelFunc
	done   chan struct{}
}

// Acquire starts the loop of key unless it runs, and returns the func
// that lets go of it. When the last holder of key lets go, release stops
// the loop, waits for its Move call in progress to return, and closes the
// task within ctx. A release func may be called more than once; calls
// after the first do nothing. Acquire returns open's error, and starts
// nothing then.
func (m *Mover) Acquire(key string) (release func(ctx context.Context), err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.running[key]
	if l == nil {
		task, err := m.open(key)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithCancel(context.Background())
		l = &moverLoop{task: task, cancel: cancel, done: make(chan struct{})}
		m.running[key] = l
		go m.run(ctx, key, l)
	}
	l.refs++
	var once sync.Once
	return func(ctx context.Context) {
		once.Do(func() {
			m.mu.Lock()
			l.refs--
			last := l.refs == 0
			if last {
				delete(m.running, key)
			}
			m.mu.Unlock()
			if last {
				l.cancel()
				<-l.done
				l.task.Close(ctx)
			}
		})
	}, nil
}

// run calls key's Move until ctx ends, waiting what it asks between calls
// and backing off after an error.
func (m *Mover) run(ctx context.Context, key string, l *moverLoop) {
	defer close(l.done)
	var bo backoff.Backoff
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		wait, err := l.task.Move(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			m.log.Warn("relay: moving due delayed messages failed; retrying", "key", key, "err", err, "attempt", bo.Attempts()+1)
			wait = bo.Next()
		} else {
			bo.Reset()
		}
		if wait <= 0 {
			continue
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
