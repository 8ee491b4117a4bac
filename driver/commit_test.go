package driver

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// committingRecv hands out n messages and records the Committer
// calls: how many acks Settle had recorded when each Commit came, and
// which failed (the first failures ones fail).
type committingRecv struct {
	nopSettler
	n        int
	failures int

	mu      sync.Mutex
	given   int
	acked   int
	calls   int
	landed  []int // acks recorded at each successful Commit
	settled chan struct{}
}

func (r *committingRecv) Receive(ctx context.Context, max int) ([]Received, error) {
	r.mu.Lock()
	k := min(r.n-r.given, max)
	first := r.given
	r.given += k
	r.mu.Unlock()
	if k == 0 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	out := make([]Received, 0, k)
	for i := first; i < first+k; i++ {
		out = append(out, Received{Msg: &relay.Message{ID: string(rune('a' + i))}, Attempt: 1, Handle: i})
	}
	return out, nil
}

func (r *committingRecv) Settle(_ context.Context, batch []Settle) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range batch {
		if s.Ack {
			r.acked++
		}
	}
	return nil
}

func (r *committingRecv) Commit(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.calls <= r.failures {
		return errors.New("commit refused")
	}
	r.landed = append(r.landed, r.acked)
	if r.acked == r.n && r.settled != nil {
		close(r.settled)
		r.settled = nil
	}
	return nil
}

// A Committer's commit comes after its acks were settled, and a commit
// the broker refused is retried until it lands, though no more acks come.
func TestCommitterRetriesUntilLanded(t *testing.T) {
	for _, interval := range []time.Duration{0, 20 * time.Millisecond} {
		t.Run("interval="+interval.String(), func(t *testing.T) {
			landed := make(chan struct{})
			r := &committingRecv{n: 3, failures: 3, settled: landed}
			s := NewSubscriber(recvSub{r}, Options{InFlight: 8, CommitInterval: interval})
			defer s.Close()
			ch, err := s.Subscribe(t.Context(), "t")
			if err != nil {
				t.Fatal(err)
			}
			for range r.n {
				if err := (<-ch).Ack(); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-landed:
			case <-time.After(10 * time.Second):
				r.mu.Lock()
				defer r.mu.Unlock()
				t.Fatalf("no commit landed after %d calls (%d refused)", r.calls, r.failures)
			}
		})
	}
}

// blockingCommitRecv is committingRecv whose commits wait for release.
type blockingCommitRecv struct {
	committingRecv
	entered chan struct{}
	release chan struct{}
}

func (r *blockingCommitRecv) Commit(ctx context.Context) error {
	r.entered <- struct{}{}
	<-r.release
	return r.committingRecv.Commit(ctx)
}

// The commit after a settlement comes before the batch's window slots
// are freed (so the window bounds what a crash redelivers); with
// CommitInterval the slots come back without waiting for it.
func TestCommitBeforeSlotsFreed(t *testing.T) {
	for _, interval := range []time.Duration{0, time.Hour} {
		t.Run("interval="+interval.String(), func(t *testing.T) {
			r := &blockingCommitRecv{committingRecv: committingRecv{n: 2},
				entered: make(chan struct{}, 1), release: make(chan struct{})}
			s := NewSubscriber(recvSub{r}, Options{InFlight: 1, CommitInterval: interval})
			ch, err := s.Subscribe(t.Context(), "t")
			if err != nil {
				t.Fatal(err)
			}
			if err := (<-ch).Ack(); err != nil {
				t.Fatal(err)
			}
			select {
			case m := <-ch:
				if interval == 0 {
					t.Fatalf("message %s delivered while the commit of the one before was in flight (window 1)", m.ID)
				}
			case <-r.entered:
				if interval > 0 {
					t.Fatal("committed at once with CommitInterval set")
				}
				close(r.release)
				<-ch // the slot comes back once the commit returned
			case <-time.After(10 * time.Second):
				t.Fatal("neither a commit nor the next message")
			}
			if interval > 0 {
				close(r.release)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A batch of nacks alone asks for no commit.
func TestCommitterNotCalledForNacks(t *testing.T) {
	r := &committingRecv{n: 2}
	s := NewSubscriber(recvSub{r}, Options{InFlight: 8})
	ch, err := s.Subscribe(t.Context(), "t")
	if err != nil {
		t.Fatal(err)
	}
	for range r.n {
		if err := (<-ch).Nack(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls != 0 {
		t.Fatalf("%d commits for nacks only, want none", r.calls)
	}
}
