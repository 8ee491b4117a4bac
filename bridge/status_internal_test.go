package bridge

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// The 10-second rate is the increase since the oldest sample at most 10 s
// old, per second; samples older than the window, or a ring without any,
// do not count.
func TestRateRing(t *testing.T) {
	var r rateRing
	t0 := time.Unix(1000, 0)
	if got := r.rate(t0, 5, rateWindow); got != 0 {
		t.Errorf("empty ring: rate %v", got)
	}
	// 25 samples, one a second, counting 10 more each second: the ring
	// keeps the last 11.
	for i := range 25 {
		r.add(t0.Add(time.Duration(i)*time.Second), int64(10*i))
	}
	now := t0.Add(24 * time.Second)
	// The oldest sample within 10 s is at 14 s (count 140).
	if got := r.rate(now, 240, rateWindow); got != 10 {
		t.Errorf("rate = %v, want 10", got)
	}
	// Half a second later, with 5 more: the sample at 14 s is now 10.5 s
	// old, so the one at 15 s (150) is the base: (245-150)/9.5 s.
	if got, want := r.rate(now.Add(500*time.Millisecond), 245, rateWindow), 95/9.5; got != want {
		t.Errorf("rate = %v, want %v", got, want)
	}
	// Long after the last sample nothing is within the window.
	if got := r.rate(now.Add(11*time.Second), 300, rateWindow); got != 0 {
		t.Errorf("stale ring: rate %v", got)
	}
	// A single fresh sample is a base too.
	var one rateRing
	one.add(t0, 0)
	if got := one.rate(t0.Add(2*time.Second), 7, rateWindow); got != 3.5 {
		t.Errorf("one sample: rate %v, want 3.5", got)
	}
}

// A route whose bridge is stopping while a message is still being
// forwarded is draining; once Run returned, it is stopped.
func TestStateDraining(t *testing.T) {
	src := "mem://drain-" + relay.NewID()
	b, err := New(Config{Routes: []Route{{
		Name: "r", From: Source{URL: src, Topic: "t", Group: "g"}, To: Destination{URL: holdScheme + "://x"},
	}}}, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	hold.Lock()
	hold.release = release
	hold.Unlock()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	released, returned := false, false
	defer func() {
		if !released {
			close(release)
		}
		stop()
		if !returned {
			<-done
		}
	}()
	pub, err := relay.OpenPublisher(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Publish(context.Background(), "t", relay.NewMessage([]byte("held"))); err != nil {
		t.Fatal(err)
	}
	waitState := func(what string, ok func(RouteStatus) bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			rs := b.Status().Routes[0]
			if ok(rs) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s after 30s: %+v", what, rs)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitState("running with 1 in flight", func(rs RouteStatus) bool { return rs.State == StateRunning && rs.InFlight == 1 })
	stop()
	waitState("draining", func(rs RouteStatus) bool { return rs.State == StateDraining && rs.InFlight == 1 })
	close(release)
	released = true
	err = <-done
	returned = true
	if err != nil {
		t.Fatalf("drain: %v", err)
	}
	if rs := b.Status().Routes[0]; rs.State != StateStopped || rs.InFlight != 0 || rs.Forwarded != 1 {
		t.Errorf("after Run: %+v", rs)
	}
}
