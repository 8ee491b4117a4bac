package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-relay/relay"
)

const (
	benchRunKey  = "relay-bench-run"
	benchSentKey = "relay-bench-sent" // publish time, Unix nanoseconds
)

func runBench(e *env, args []string) int {
	fs := newFlagSet(e, "bench", "URL TOPIC", `
Measure a broker through relay: publish -n messages of -size bytes to TOPIC
(in Publish calls of -batch messages from -publishers goroutines) while a
subscriber in a fresh group consumes and acks them. Progress is printed on
stderr every second; at the end, throughput of both sides and percentiles of
the publish-call latency and of the end-to-end latency (publish to
delivery, same clock).

The group is provisioned before publishing, where the adapter supports it,
so that no message is missed. Messages of other runs in the same group are
acked and not counted. Use --mode publish or --mode consume to measure one
side only (consume counts any message of the topic).

Exits 1 when not every message was consumed within --timeout.`)
	n := fs.Int("n", 10000, "number of messages")
	size := fs.Int("size", 1024, "payload size in `bytes`")
	batch := fs.Int("batch", 100, "messages per Publish call")
	pubs := fs.Int("publishers", 4, "concurrent publishing goroutines")
	group := fs.String("group", "", "consumer `group` (default: a fresh bench-… group)")
	mode := fs.String("mode", "both", "both, publish or consume")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long")
	verbose := fs.Bool("v", false, "log adapter events at debug level")
	if code, ok := parse(fs, args, 2, 2); !ok {
		return code
	}
	clientLogger(e, *verbose)
	switch {
	case *n < 1:
		return usageErr(e, "bench", "-n must be at least 1")
	case *size < 0:
		return usageErr(e, "bench", "-size must not be negative")
	case *batch < 1 || *pubs < 1:
		return usageErr(e, "bench", "-batch and -publishers must be at least 1")
	case *mode != "both" && *mode != "publish" && *mode != "consume":
		return usageErr(e, "bench", "-mode must be both, publish or consume")
	}
	rawURL, topic := fs.pos[0], fs.pos[1]
	if code, ok := checkTopic(e, "bench", topic); !ok {
		return code
	}
	run := relay.NewID()
	if *group == "" {
		*group = "bench-" + run[len(run)-12:]
	}
	ctx, cancel := signalContext()
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, *timeout)
	defer cancelT()

	b := &bench{n: *n, run: run, mode: *mode}
	var sub relay.Subscriber
	var ch <-chan *relay.Message
	if *mode != "publish" {
		surl, err := subscriberURL(rawURL, *group)
		if err != nil {
			return usageErr(e, "bench", err.Error())
		}
		if sub, err = relay.OpenSubscriber(ctx, surl); err != nil {
			return failed(e, "bench", err)
		}
		defer sub.Close()
		if p, ok := sub.(relay.Provisioner); ok {
			if err := p.Provision(ctx, topic); err != nil {
				fmt.Fprintf(e.stderr, "relay bench: provision: %v\n", err)
				return exitFailure
			}
		}
		subCtx, stopSub := context.WithCancel(context.Background())
		defer stopSub()
		if ch, err = sub.Subscribe(subCtx, topic); err != nil {
			return failed(e, "bench", err)
		}
	}
	var pub relay.Publisher
	if *mode != "consume" {
		var err error
		if pub, err = relay.OpenPublisher(ctx, rawURL); err != nil {
			return failed(e, "bench", err)
		}
		defer pub.Close()
	}

	b.start = time.Now()
	progressDone := make(chan struct{})
	stopProgress := make(chan struct{})
	go func() {
		defer close(progressDone)
		b.progress(e.stderr, stopProgress)
	}()

	var wg sync.WaitGroup
	errs := make(chan error, *pubs+1)
	if ch != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.consume(ctx, ch); err != nil {
				errs <- err
			}
		}()
	}
	if pub != nil {
		payload := make([]byte, *size)
		_, _ = rand.Read(payload)
		var next atomic.Int64
		for range *pubs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := b.publish(ctx, pub, topic, payload, *batch, &next); err != nil {
					errs <- err
					cancelT()
				}
			}()
		}
	}
	wg.Wait()
	close(stopProgress)
	<-progressDone
	close(errs)
	failed := false
	for err := range errs {
		fmt.Fprintf(e.stderr, "relay bench: %v\n", err)
		failed = true
	}
	b.report(e.stdout, *size, *batch, *pubs)
	if failed || (ch != nil && int(b.consumed.Load()) < *n) || (pub != nil && int(b.published.Load()) < *n) {
		return exitFailure
	}
	return exitOK
}

type bench struct {
	n    int
	run  string
	mode string

	start               time.Time
	published, consumed atomic.Int64
	duplicates          atomic.Int64
	pubEnd, conEnd      atomic.Int64 // Unix nanos of the last publish / consume
	mu                  sync.Mutex
	pubLat, e2eLat      []time.Duration
}

func (b *bench) publish(ctx context.Context, pub relay.Publisher, topic string, payload []byte, batch int, next *atomic.Int64) error {
	for {
		lo := next.Add(int64(batch)) - int64(batch)
		if lo >= int64(b.n) {
			return nil
		}
		hi := min(lo+int64(batch), int64(b.n))
		msgs := make([]*relay.Message, 0, hi-lo)
		now := time.Now()
		sent := strconv.FormatInt(now.UnixNano(), 10)
		for range hi - lo {
			m := relay.NewMessage(payload)
			m.Metadata = relay.Metadata{benchRunKey: b.run, benchSentKey: sent}
			msgs = append(msgs, m)
		}
		if err := pub.Publish(ctx, topic, msgs...); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		d := time.Since(now)
		b.mu.Lock()
		b.pubLat = append(b.pubLat, d)
		b.mu.Unlock()
		b.published.Add(hi - lo)
		b.pubEnd.Store(time.Now().UnixNano())
	}
}

func (b *bench) consume(ctx context.Context, ch <-chan *relay.Message) error {
	seen := make(map[string]bool, b.n)
	lat := make([]time.Duration, 0, b.n)
	defer func() {
		b.mu.Lock()
		b.e2eLat = lat
		b.mu.Unlock()
	}()
	for int(b.consumed.Load()) < b.n {
		select {
		case <-ctx.Done():
			return fmt.Errorf("consumed %d of %d messages: %w", b.consumed.Load(), b.n, ctx.Err())
		case m, ok := <-ch:
			if !ok {
				return fmt.Errorf("subscription ended after %d of %d messages", b.consumed.Load(), b.n)
			}
			now := time.Now()
			_ = m.Ack()
			if b.mode == "both" && m.Metadata[benchRunKey] != b.run {
				continue
			}
			if seen[m.ID] {
				b.duplicates.Add(1)
				continue
			}
			seen[m.ID] = true
			if ns, err := strconv.ParseInt(m.Metadata[benchSentKey], 10, 64); err == nil && b.mode == "both" {
				lat = append(lat, now.Sub(time.Unix(0, ns)))
			}
			b.consumed.Add(1)
			b.conEnd.Store(now.UnixNano())
		}
	}
	return nil
}

func (b *bench) progress(w io.Writer, stop <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var lastP, lastC int64
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		p, c := b.published.Load(), b.consumed.Load()
		line := fmt.Sprintf("%5.0fs", time.Since(b.start).Seconds())
		if b.mode != "consume" {
			line += fmt.Sprintf("  published %d/%d (%d/s)", p, b.n, p-lastP)
		}
		if b.mode != "publish" {
			line += fmt.Sprintf("  consumed %d/%d (%d/s)", c, b.n, c-lastC)
		}
		fmt.Fprintln(w, line)
		lastP, lastC = p, c
	}
}

func (b *bench) report(w io.Writer, size, batch, pubs int) {
	fmt.Fprintf(w, "messages:    %d × %d bytes", b.n, size)
	if b.mode != "consume" {
		fmt.Fprintf(w, ", batch %d, %d publisher(s)", batch, pubs)
	}
	fmt.Fprintln(w)
	rate := func(n int64, end int64) string {
		if n == 0 || end == 0 {
			return "-"
		}
		d := time.Unix(0, end).Sub(b.start)
		perSec := float64(n) / d.Seconds()
		return fmt.Sprintf("%d in %s = %.0f msg/s (%.2f MiB/s)", n, d.Round(time.Millisecond), perSec, perSec*float64(size)/(1<<20))
	}
	if b.mode != "consume" {
		fmt.Fprintf(w, "publish:     %s\n", rate(b.published.Load(), b.pubEnd.Load()))
	}
	if b.mode != "publish" {
		fmt.Fprintf(w, "consume:     %s\n", rate(b.consumed.Load(), b.conEnd.Load()))
		fmt.Fprintf(w, "duplicates:  %d\n", b.duplicates.Load())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pubLat) > 0 {
		fmt.Fprintf(w, "publish call latency: %s\n", percentiles(b.pubLat))
	}
	if len(b.e2eLat) > 0 {
		fmt.Fprintf(w, "end-to-end latency:   %s\n", percentiles(b.e2eLat))
	}
}

// percentiles formats p50, p90, p99, p99.9 and max of d (sorted in place).
func percentiles(d []time.Duration) string {
	slices.Sort(d)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(d))+0.5) - 1
		return d[min(max(i, 0), len(d)-1)]
	}
	r := func(x time.Duration) time.Duration {
		switch {
		case x >= 10*time.Millisecond:
			return x.Round(time.Millisecond)
		case x >= 10*time.Microsecond:
			return x.Round(time.Microsecond)
		}
		return x
	}
	return fmt.Sprintf("p50 %s  p90 %s  p99 %s  p99.9 %s  max %s",
		r(at(0.50)), r(at(0.90)), r(at(0.99)), r(at(0.999)), r(d[len(d)-1]))
}
