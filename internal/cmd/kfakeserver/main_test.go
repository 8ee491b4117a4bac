package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
)

// TestServesKafka starts the server on free ports, produces a record to
// it and consumes it back with a plain franz-go client, then stops it.
func TestServesKafka(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first: runs last
	var out bytes.Buffer
	listening := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	w := &signalWriter{buf: &out, first: listening}
	go func() { done <- run([]string{"-port", "0", "-partitions", "3"}, w, io.Discard, func() { <-release }) }()
	// stop ends run and returns its error; the cleanup stops it too when
	// the test fails before its end.
	stop := sync.OnceValue(func() error { close(release); return <-done })
	t.Cleanup(func() { _ = stop() })
	select {
	case <-listening:
	case err := <-done:
		t.Fatalf("run ended before listening: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not listening within 10s")
	}
	line := strings.TrimSpace(out.String())
	addr, ok := strings.CutPrefix(line, "kfakeserver: listening on ")
	if !ok || addr == "" {
		t.Fatalf("first line %q does not name the address", line)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	// Created without a partition count, so that -partitions applies.
	cr, err := kadm.NewClient(cl).CreateTopic(ctx, -1, -1, nil, "t")
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}
	if cr.NumPartitions != 3 {
		t.Fatalf("topic created with %d partitions; -partitions 3 was given", cr.NumPartitions)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("hello")}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	fs := cl.PollRecords(ctx, 10)
	if err := fs.Err0(); err != nil {
		t.Fatalf("poll: %v", err)
	}
	recs := fs.Records()
	if len(recs) != 1 || string(recs[0].Value) != "hello" {
		t.Fatalf("consumed %d records (%v), want the one produced", len(recs), recs)
	}
	cl.Close()
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
}

func TestRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-brokers", "0"}, {"-partitions", "0"}, {"-port", "70000"}, {"extra"}, {"-nope"}} {
		err := run(args, io.Discard, io.Discard, func() { t.Fatalf("%q: started the cluster", args) })
		var usage usageError
		if !errors.As(err, &usage) {
			t.Errorf("%q: got %v, want a usage error", args, err)
		}
	}
}

// signalWriter closes first after the first write.
type signalWriter struct {
	buf   *bytes.Buffer
	first chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	n, err := w.buf.Write(p)
	if w.first != nil {
		close(w.first)
		w.first = nil
	}
	return n, err
}
