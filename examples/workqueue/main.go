// Command workqueue shares image-resize jobs among workers: competing
// consumers.
//
// A catalog queues resize jobs on one topic. N workers subscribe in the
// same group ("resizers"), so each job goes to exactly one of them; a
// worker that is busy gets no new job (inflight=1), so the work spreads by
// who is free. Each worker runs a router: its handler "resizes" the image
// and returns a result message, which the router publishes to the results
// topic before it acks the job. One job fails once (the worker hits a
// corrupt cache); the router nacks it with a short delay and the group
// hands it out again — often to another worker.
//
// The program exits 0 when every job has a result, and drains the workers
// gracefully on Ctrl-C: jobs in progress finish and are acked, the rest
// stay queued.
//
//	go run ./examples/workqueue -workers 4 -jobs 20
//	go run ./examples/workqueue -broker amqp://guest:guest@127.0.0.1:5672/
//	BROKER=redis://127.0.0.1:6379/0 go run ./examples/workqueue
//
// -broker wins over $BROKER; the default is mem://workqueue.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/middleware"
	"github.com/go-relay/relay/router"

	_ "github.com/go-relay/relay/adapters/amqp"        // registers amqp://, amqps://
	_ "github.com/go-relay/relay/adapters/kafka"       // registers kafka://
	_ "github.com/go-relay/relay/adapters/memory"      // registers mem://
	_ "github.com/go-relay/relay/adapters/redisstream" // registers redis://, rediss://
)

func main() {
	broker := brokerFlag(flag.CommandLine)
	workers := flag.Int("workers", 3, "number of workers")
	jobs := flag.Int("jobs", 12, "number of resize jobs")
	timeout := flag.Duration("timeout", 30*time.Second, "give up if not every job is done by then")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if _, err := run(ctx, os.Stdout, *broker, *workers, *jobs); err != nil {
		fmt.Fprintln(os.Stderr, "workqueue:", err)
		os.Exit(1)
	}
}

// brokerFlag defines -broker on fs.
func brokerFlag(fs *flag.FlagSet) *string {
	return envFlag(fs, "broker", "mem://workqueue", "broker URL; workers add group=resizers to it")
}

// envFlag defines the string flag -name on fs, whose default is $NAME, else def.
func envFlag(fs *flag.FlagSet, name, def, usage string) *string {
	v := os.Getenv(strings.ToUpper(name))
	if v == "" {
		v = def
	}
	return fs.String(name, v, fmt.Sprintf("%s (default $%s, else %s)", usage, strings.ToUpper(name), def))
}

// Result is what a run did: jobs done per worker, and results received.
type Result struct {
	PerWorker map[string]int
	Results   int // distinct jobs with a result
	Retried   int // jobs that failed once and were handed out again
}

// flakyJob fails on its first delivery.
const flakyJob = 5

func run(ctx context.Context, out io.Writer, broker string, workers, jobs int) (*Result, error) {
	id := relay.NewID()
	runID := id[len(id)-8:] // fresh topics per run
	jobTopic, resultTopic := "resize-jobs-"+runID, "resize-results-"+runID
	fmt.Fprintf(out, "work queue on %s (run %s): %d jobs, %d workers\n\n", relay.Redact(broker), runID, jobs, workers)

	pub, err := relay.OpenPublisher(ctx, broker)
	if err != nil {
		return nil, err
	}
	defer pub.Close()

	var mu sync.Mutex
	res := &Result{PerWorker: map[string]int{}}
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}

	// The collector: every result, once per job.
	results, err := openSub(ctx, broker, "collector", resultTopic)
	if err != nil {
		return nil, err
	}
	defer results.Close()

	// The workers: one router each, as separate processes would have.
	var routers []*router.Router
	var wg sync.WaitGroup
	defer func() {
		for _, r := range routers {
			r.Close() // drains: the job in progress finishes and is acked
		}
		wg.Wait()
	}()
	for w := 1; w <= workers; w++ {
		name := fmt.Sprintf("worker-%d", w)
		// inflight=1: a worker holds one job at a time, so a busy worker
		// leaves the next job to a free one.
		sub, err := openSub(ctx, broker, "resizers", jobTopic, "inflight=1")
		if err != nil {
			return nil, err
		}
		r, err := router.New(router.Config{
			CloseTimeout:    10 * time.Second,
			RedeliveryDelay: router.ExponentialRedelivery(100*time.Millisecond, time.Second),
			// The story prints the failure itself; the router logs only errors.
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
		})
		if err != nil {
			return nil, err
		}
		r.Own(sub) // the worker's subscriber is its own; the publisher is shared and not owned
		_ = r.Use(middleware.CorrelationID, middleware.Recoverer)
		err = r.AddHandler(name, sub, jobTopic, func(ctx context.Context, job *relay.Message) ([]*relay.Message, error) {
			photo := string(job.Payload)
			if job.Metadata.Get("n") == fmt.Sprint(flakyJob) && job.Attempt() == 1 {
				say("  %-9s !  %s: corrupt cache, giving the job back", name, photo)
				return nil, errors.New("corrupt cache")
			}
			select { // "resizing"
			case <-time.After(30 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			again := ""
			if job.Attempt() > 1 {
				again = fmt.Sprintf(" (delivery %d)", job.Attempt())
			}
			say("  %-9s <- resized %s%s", name, photo, again)
			done := relay.NewMessage([]byte(strings.TrimSuffix(photo, ".jpg") + "-320px.jpg"))
			done.Metadata = relay.Metadata{"job": job.ID, "worker": name, "attempt": fmt.Sprint(job.Attempt())}
			return []*relay.Message{done}, nil // published to the results before the job is acked
		}, router.WithOutput(pub, resultTopic))
		if err != nil {
			return nil, err
		}
		routers = append(routers, r)
		errc := make(chan error, 1)
		wg.Go(func() {
			err := r.Run(ctx)
			if err != nil {
				say("  %s stopped: %v", name, err)
			}
			errc <- err
		})
		select {
		case <-r.Running():
		case err := <-errc:
			return nil, err
		}
	}

	// The catalog queues the jobs.
	var batch []*relay.Message
	want := map[string]bool{}
	for i := 1; i <= jobs; i++ {
		m := relay.NewMessage(fmt.Appendf(nil, "photo-%02d.jpg", i))
		m.Metadata = relay.Metadata{"n": fmt.Sprint(i)}
		batch = append(batch, m)
		want[m.ID] = true
	}
	if err := pub.Publish(ctx, jobTopic, batch...); err != nil {
		return nil, fmt.Errorf("queue jobs: %w", err)
	}

	ch, err := results.Subscribe(ctx, resultTopic)
	if err != nil {
		return nil, err
	}
	for len(want) > 0 {
		select {
		case m, ok := <-ch:
			if !ok {
				return res, fmt.Errorf("results subscription ended with %d job(s) outstanding", len(want))
			}
			job := m.Metadata.Get("job")
			if want[job] { // at-least-once: a result may arrive twice; count it once
				delete(want, job)
				mu.Lock()
				res.Results++
				res.PerWorker[m.Metadata.Get("worker")]++
				if m.Metadata.Get("attempt") != "1" {
					res.Retried++
				}
				mu.Unlock()
			}
			_ = m.Ack()
		case <-ctx.Done():
			return res, fmt.Errorf("%d of %d job(s) without a result: %w", len(want), jobs, ctx.Err())
		}
	}

	mu.Lock()
	defer mu.Unlock()
	names := make([]string, 0, len(res.PerWorker))
	for n := range res.PerWorker {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(out, "\nsummary: %d of %d jobs resized, %d handed out again after a failure\n", res.Results, jobs, res.Retried)
	for _, n := range names {
		fmt.Fprintf(out, "  %-9s did %d\n", n, res.PerWorker[n])
	}
	return res, nil
}

// openSub opens a subscriber of group and provisions topic for it, so that
// messages published from now on are kept for the group.
func openSub(ctx context.Context, broker, group, topic string, params ...string) (relay.Subscriber, error) {
	u := broker
	switch {
	case !strings.Contains(u, "?"):
		u += "?"
	case !strings.HasSuffix(u, "?") && !strings.HasSuffix(u, "&"):
		u += "&"
	}
	u += strings.Join(append([]string{"group=" + group}, params...), "&")
	sub, err := relay.OpenSubscriber(ctx, u)
	if err != nil {
		return nil, err
	}
	if p, ok := sub.(relay.Provisioner); ok {
		if err := p.Provision(ctx, topic); err != nil && !errors.Is(err, relay.ErrNotSupported) {
			sub.Close()
			return nil, fmt.Errorf("provision %s for group %s: %w", topic, group, err)
		}
	}
	return sub, nil
}
