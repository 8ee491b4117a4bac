package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/go-relay/relay"
)

func runPublish(e *env, args []string) int {
	fs := newFlagSet(e, "publish", "URL TOPIC", `
Publish messages to TOPIC. The payload is --data, or stdin read to its end
(binary-safe), or with --lines one message per line of stdin. Each message
gets a fresh ID (UUIDv7) unless --id is given. The IDs of the published
messages are printed on stdout, one per line. Publish returns only when the
broker confirmed every message.

Examples:
  echo '{"order":1}' | relay publish redis://127.0.0.1:6379/0 orders --key c-42 --header type=order
  relay publish amqp://guest:guest@127.0.0.1:5672/ jobs --data ping --count 1000`)
	data := fs.String("data", "", "payload `text` (instead of stdin)")
	key := fs.String("key", "", "message Key (ordering / partition key)")
	id := fs.String("id", "", "message `ID` (default: a new UUIDv7; only with --count 1)")
	hdr := headers{}
	fs.Var(hdr, "header", "metadata `key=value`; repeat for more")
	count := fs.Int("count", 1, "publish the payload this many times (each with its own ID)")
	batch := fs.Int("batch", 100, "messages per Publish call")
	lines := fs.Bool("lines", false, "publish each line of stdin as its own message")
	timeout := fs.Duration("timeout", time.Minute, "give up after this long")
	quiet := fs.Bool("q", false, "do not print the IDs")
	verbose := fs.Bool("v", false, "log adapter events at debug level")
	if code, ok := parse(fs, args, 2, 2); !ok {
		return code
	}
	clientLogger(e, *verbose)
	rawURL, topic := fs.pos[0], fs.pos[1]
	if code, ok := refuseInProcess(e, "publish", rawURL); !ok {
		return code
	}
	if code, ok := checkTopic(e, "publish", topic); !ok {
		return code
	}
	switch {
	case *count < 1:
		return usageErr(e, "publish", "--count must be at least 1")
	case *batch < 1:
		return usageErr(e, "publish", "--batch must be at least 1")
	case *id != "" && (*count != 1 || *lines):
		return usageErr(e, "publish", "--id needs --count 1 and no --lines")
	case *lines && flagWasSet(fs, "data"):
		return usageErr(e, "publish", "--lines reads stdin; it cannot be used with --data")
	}

	var payloads [][]byte
	switch {
	case flagWasSet(fs, "data"):
		payloads = [][]byte{[]byte(*data)}
	case stdinIsTerminal(e.stdin):
		return usageErr(e, "publish", "no payload: pipe it on stdin or give --data")
	case *lines:
		sc := bufio.NewScanner(e.stdin)
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		for sc.Scan() {
			payloads = append(payloads, bytes.Clone(sc.Bytes()))
		}
		if err := sc.Err(); err != nil {
			fmt.Fprintf(e.stderr, "relay publish: reading stdin: %v\n", err)
			return exitFailure
		}
	default:
		b, err := io.ReadAll(e.stdin)
		if err != nil {
			fmt.Fprintf(e.stderr, "relay publish: reading stdin: %v\n", err)
			return exitFailure
		}
		payloads = [][]byte{b}
	}

	ctx, cancel := signalContext()
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, *timeout)
	defer cancelT()
	pub, err := relay.OpenPublisher(ctx, rawURL)
	if err != nil {
		return failed(e, "publish", err)
	}
	defer pub.Close()
	if code, ok := checkGroups(ctx, e, "publish", pub, topic); !ok {
		return code
	}

	var msgs []*relay.Message
	for _, p := range payloads {
		for range *count {
			m := relay.NewMessage(p)
			if *id != "" {
				m.ID = *id
			}
			m.Key = *key
			if len(hdr) > 0 {
				m.Metadata = relay.Metadata(hdr).Clone()
			}
			msgs = append(msgs, m)
		}
	}
	out := bufio.NewWriter(e.stdout)
	defer out.Flush()
	start := time.Now()
	sent := 0
	for len(msgs) > 0 {
		n := min(*batch, len(msgs))
		if err := pub.Publish(ctx, topic, msgs[:n]...); err != nil {
			return failed(e, "publish", fmt.Errorf("%d of %d published, then: %w", sent, sent+len(msgs), err))
		}
		if !*quiet {
			for _, m := range msgs[:n] {
				fmt.Fprintln(out, m.ID)
			}
		}
		sent += n
		msgs = msgs[n:]
	}
	fmt.Fprintf(e.stderr, "published %d message(s) to %s in %s\n", sent, topic, time.Since(start).Round(time.Millisecond))
	return exitOK
}

func usageErr(e *env, cmd, msg string) int {
	fmt.Fprintf(e.stderr, "relay %s: %s (see relay %s --help)\n", cmd, msg, cmd)
	return exitUsage
}

// checkGroups asks pub (within ctx) whether a message published to topic now would
// reach a group (relay.GroupChecker), so that a command refuses, with
// exit 1 and the broker's answer (which says how to provision a group),
// rather than publish what nobody will ever receive: PostgreSQL and SNS
// store nothing for a group that does not exist yet, RabbitMQ returns it
// unroutable. When the broker cannot tell (MQTT), the command warns and
// goes on; when the check itself fails, it goes on: Publish reports what
// fails.
func checkGroups(ctx context.Context, e *env, cmd string, pub relay.Publisher, topic string) (int, bool) {
	gc, ok := pub.(relay.GroupChecker)
	if !ok {
		return exitOK, true
	}
	err := gc.CheckGroups(ctx, topic)
	switch {
	case err == nil:
		return exitOK, true
	case errors.Is(err, relay.ErrNotSupported):
		fmt.Fprintf(e.stderr, "relay %s: warning: %v; if no group is subscribed to %q yet, what is published now may be dropped (provision one first: relay provision URL %s --group GROUP)\n", cmd, err, topic, topic)
		return exitOK, true
	case errors.Is(err, relay.ErrNoGroup):
		fmt.Fprintf(e.stderr, "relay %s: nothing published: %v\n", cmd, err)
		return exitFailure, false
	}
	fmt.Fprintf(e.stderr, "relay %s: could not check that topic %q has a group (publishing anyway): %v\n", cmd, topic, err)
	return exitOK, true
}
