package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/go-relay/relay"
)

// Metadata written by the router's PoisonQueue middleware
// (middleware.PoisonTopicKey and its siblings, all with this prefix).
const (
	poisonTopicKey      = "relay-poison-topic"
	poisonOriginalIDKey = "relay-poison-original-id"
	poisonKeyPrefix     = "relay-poison-"
)

func runReplay(e *env, args []string) int {
	fs := newFlagSet(e, "replay", "URL POISON_TOPIC", `
Move messages from a poison topic back to the topic they failed on, as
recorded by the PoisonQueue middleware in the metadata key
relay-poison-topic. Each message is published (with the ID it had before
it was poisoned, from relay-poison-original-id, and the same Key, Payload
and metadata, minus the relay-poison-* keys unless --keep-metadata) to --to
(default: URL without group=) and only then acked on the poison topic.

Publishing is limited to --rate messages per second so that a fixed
consumer is not flooded. The command ends after --count messages, or when
no message arrived for --idle. A message without relay-poison-topic is
left on the poison topic (released at exit) unless --topic names the
destination for all.

With --dry-run, messages are printed and nothing is published or acked.

Example:
  relay replay redis://127.0.0.1:6379/0 orders.poison --group replay --rate 50`)
	group := fs.String("group", "", "consumer `group` on the poison topic (or group= in the URL; not for sqs://)")
	to := fs.String("to", "", "`URL` to publish to (default: URL without group=)")
	topic := fs.String("topic", "", "publish every message to this `topic` instead of its recorded origin")
	rate := fs.Float64("rate", 100, "messages per second (0: no limit)")
	count := fs.Int("count", 0, "stop after this many messages (0: until idle)")
	idle := fs.Duration("idle", 10*time.Second, "stop when no message arrived for this long")
	keep := fs.Bool("keep-metadata", false, "keep the relay-poison-* metadata keys")
	dry := fs.Bool("dry-run", false, "print what would be replayed; publish and ack nothing")
	verbose := fs.Bool("v", false, "log adapter events at debug level")
	if code, ok := parse(fs, args, 2, 2); !ok {
		return code
	}
	clientLogger(e, *verbose)
	for _, u := range []string{fs.pos[0], *to} {
		if code, ok := refuseInProcess(e, "replay", u); !ok {
			return code
		}
	}
	if *rate < 0 || *count < 0 || *idle <= 0 {
		return usageErr(e, "replay", "--rate and --count must not be negative, --idle must be positive")
	}
	srcURL, code, ok := groupURL(e, "replay", fs.pos[0], *group)
	if !ok {
		return code
	}
	poisonTopic := fs.pos[1]
	if code, ok := checkTopic(e, "replay", poisonTopic); !ok {
		return code
	}
	dstURL := *to
	if dstURL == "" {
		u, err := url.Parse(fs.pos[0])
		if err != nil {
			return usageErr(e, "replay", "bad URL "+relay.Redact(fs.pos[0]))
		}
		q := u.Query()
		q.Del("group")
		if len(q) > 0 {
			return usageErr(e, "replay", "URL has parameters other than group=; give the publishing URL with --to")
		}
		u.RawQuery = ""
		dstURL = u.String()
	}

	ctx, cancel := signalContext()
	defer cancel()
	openCtx, cancelOpen := context.WithTimeout(ctx, 30*time.Second)
	defer cancelOpen()
	sub, err := relay.OpenSubscriber(openCtx, srcURL)
	if err != nil {
		return failed(e, "replay", err)
	}
	defer sub.Close()
	var pub relay.Publisher
	if !*dry {
		if pub, err = relay.OpenPublisher(openCtx, dstURL); err != nil {
			return failed(e, "replay", err)
		}
		defer pub.Close()
	}
	subCtx, stopSub := context.WithCancel(context.Background())
	defer stopSub()
	ch, err := sub.Subscribe(subCtx, poisonTopic)
	if err != nil {
		return failed(e, "replay", err)
	}

	var interval time.Duration
	if *rate > 0 {
		interval = time.Duration(float64(time.Second) / *rate)
	}
	next := time.Now()
	replayed, skipped := 0, 0
	perTopic := map[string]int{}
	idleT := time.NewTimer(*idle)
	defer idleT.Stop()
	code = exitOK
loop:
	for *count == 0 || replayed < *count {
		select {
		case <-ctx.Done():
			break loop
		case <-idleT.C:
			break loop
		case m, ok := <-ch:
			if !ok {
				fmt.Fprintln(e.stderr, "relay replay: subscription ended")
				code = exitFailure
				break loop
			}
			idleT.Reset(*idle)
			dest := *topic
			if dest == "" {
				dest = m.Metadata[poisonTopicKey]
			}
			if dest == "" {
				skipped++
				fmt.Fprintf(e.stderr, "relay replay: message %s has no %s; left on %s (use --topic)\n", m.ID, poisonTopicKey, poisonTopic)
				continue
			}
			if *dry {
				fmt.Fprintf(e.stdout, "would replay %s to %s (reason: %s)\n", m.ID, dest, m.Metadata[poisonKeyPrefix+"reason"])
				replayed++
				perTopic[dest]++
				continue
			}
			if interval > 0 {
				if wait := time.Until(next); wait > 0 {
					select {
					case <-time.After(wait):
					case <-ctx.Done():
						break loop
					}
				}
				// Allow a burst of at most one second after a pause.
				if floor := time.Now().Add(-time.Second); next.Before(floor) {
					next = floor
				}
				next = next.Add(interval)
			}
			c := m.Copy()
			if id := m.Metadata[poisonOriginalIDKey]; id != "" {
				c.ID = id // the poison copy has an ID of its own
			}
			if !*keep {
				for k := range c.Metadata {
					if strings.HasPrefix(k, poisonKeyPrefix) {
						delete(c.Metadata, k)
					}
				}
			}
			pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
			err := pub.Publish(pctx, dest, c)
			pcancel()
			if err != nil {
				fmt.Fprintf(e.stderr, "relay replay: publishing %s to %s: %v (left on %s)\n", c.ID, dest, err, poisonTopic)
				_ = m.Nack()
				code = exitFailure
				break loop
			}
			if err := m.Ack(); err != nil {
				fmt.Fprintf(e.stderr, "relay replay: ack %s: %v (it was replayed and may be replayed again)\n", m.ID, err)
			}
			replayed++
			perTopic[dest]++
			fmt.Fprintf(e.stdout, "replayed %s to %s\n", c.ID, dest)
		}
	}
	verb := "replayed"
	if *dry {
		verb = "would replay"
	}
	fmt.Fprintf(e.stderr, "%s %d message(s)", verb, replayed)
	for t, n := range perTopic {
		fmt.Fprintf(e.stderr, "; %d to %s", n, t)
	}
	if skipped > 0 {
		fmt.Fprintf(e.stderr, "; %d left on %s without an origin", skipped, poisonTopic)
	}
	fmt.Fprintln(e.stderr)
	return code
}
