package main

import (
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// TestBridgeSurvivesSIGKILL kills the bridge with SIGKILL in the middle of
// 20,000 messages and starts it again: every message arrives. Duplicates
// (messages published to the destination whose source ack had not reached
// the broker) are counted, reported and bounded by the source's in-flight
// window plus the acks the adapter had not flushed yet.
func TestBridgeSurvivesSIGKILL(t *testing.T) {
	const (
		total    = 20000
		inflight = 64
	)
	bs := backends(t)
	byName := map[string]backend{}
	for _, b := range bs {
		byName[b.name] = b
	}
	for _, pair := range [][2]string{{"amqp", "kafka"}, {"redis", "amqp"}, {"kafka", "redis"}, {"sns", "sqs"}} {
		from, to := byName[pair[0]], byName[pair[1]]
		t.Run(from.name+"-to-"+to.name, func(t *testing.T) {
			run := id()
			in, out, group := "e2e-kill-in-"+run, "e2e-kill-out-"+run, "bridge-"+run
			from := from
			src := testenv.WithParams(from.subURL(group), "inflight", strconv.Itoa(inflight))
			cfg := fmt.Sprintf(`routes:
  - name: kill
    from: {url: %q, topic: %s}
    to: {url: %q, topic: %s}
    concurrency: 16
`, src, in, to.pubURL, out)
			provision(t, from, in, group)
			provision(t, to, out, "reader-"+run)
			rd := newReader(t, to, out, "reader-"+run)

			br := startBridge(t, cfg)
			published := make(chan error, 1)
			go func() {
				pub, err := relay.OpenPublisher(t.Context(), from.pubURL)
				if err != nil {
					published <- err
					return
				}
				defer pub.Close()
				for i := 0; i < total; i += 500 {
					batch := make([]*relay.Message, 0, 500)
					for j := i; j < i+500; j++ {
						batch = append(batch, relay.NewMessage([]byte(strconv.Itoa(j))))
					}
					if err := pub.Publish(t.Context(), in, batch...); err != nil {
						published <- err
						return
					}
				}
				published <- nil
			}()
			if !rd.waitUnique(total/4, 2*time.Minute) {
				t.Fatalf("only %d messages before the kill; stderr:\n%s", rd.unique(), br.err.String())
			}
			if code := br.signal(syscall.SIGKILL, 10*time.Second); code != -1 {
				t.Fatalf("exit code after SIGKILL = %d", code)
			}
			atKill := rd.unique()
			br2 := startBridge(t, cfg)
			if err := <-published; err != nil {
				t.Fatal(err)
			}
			if !rd.waitUnique(total, 3*time.Minute) {
				t.Fatalf("%d of %d messages arrived after the restart; stderr:\n%s", rd.unique(), total, br2.err.String())
			}
			if code := br2.signal(syscall.SIGTERM, time.Minute); code != 0 {
				t.Errorf("exit code after SIGTERM = %d; stderr:\n%s", code, br2.err.String())
			}
			msgs, counts := rd.snapshot()
			dups := len(msgs) - len(counts)
			t.Logf("%s → %s: %d messages, killed after %d had arrived, %d duplicate deliveries after the restart (source in-flight window %d)",
				from.name, to.name, total, atKill, dups, inflight)
			if dups > 2*inflight {
				t.Errorf("%d duplicates: more than twice the in-flight window %d", dups, inflight)
			}
		})
	}
}
