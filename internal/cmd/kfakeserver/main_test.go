package main

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/go-relay/relay/internal/testkit/servercmd"
)

// TestServesKafka starts the server on free ports, produces a record to
// it and consumes it back with a plain franz-go client, then stops it.
func TestServesKafka(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first: runs last
	addr, stop := servercmd.Start(t, "kfakeserver", run, "-port", "0", "-partitions", "3")

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
		var usage servercmd.UsageError
		if !errors.As(err, &usage) {
			t.Errorf("%q: got %v, want a usage error", args, err)
		}
	}
}
