package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestWorkQueueOnMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	const workers, jobs = 4, 16
	res, err := run(ctx, &out, "mem://workqueue-test-"+relay.NewID(), workers, jobs)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if res.Results != jobs {
		t.Fatalf("%d results, want %d", res.Results, jobs)
	}
	total := 0
	for w, n := range res.PerWorker {
		if !strings.HasPrefix(w, "worker-") {
			t.Errorf("unexpected worker %q", w)
		}
		total += n
	}
	if total != jobs {
		t.Errorf("workers did %d jobs, want %d (each job once)", total, jobs)
	}
	// Competing consumers: more than one worker took jobs.
	if len(res.PerWorker) < 2 {
		t.Errorf("only %d worker(s) did jobs:\n%s", len(res.PerWorker), out.String())
	}
	if res.Retried != 1 {
		t.Errorf("%d jobs redelivered, want 1", res.Retried)
	}
	for _, want := range []string{"photo-05.jpg: corrupt cache, giving the job back", "resized photo-05.jpg (delivery 2)", "16 of 16 jobs resized, 1 handed out again"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// -broker take their default from the environment, as in every example.
func TestURLFlags(t *testing.T) {
	testenv.CheckEnvFlag(t, "broker", "mem://workqueue", brokerFlag)
}
