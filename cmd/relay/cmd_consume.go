package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/go-relay/relay"
)

func runConsume(e *env, args []string) int {
	fs := newFlagSet(e, "consume", "URL TOPIC", `
Print the messages of TOPIC delivered to a group, with their metadata, until
--count messages were printed, no message arrived for --idle, --timeout
passed or SIGINT/SIGTERM.

With --ack (the default) every printed message is acked, so the group will
not see it again. With --no-ack nothing is settled: when the command ends
the messages go back to the group (a peek); at most the subscription's
in-flight window (inflight= in the URL, where the adapter has it) is seen.

--format text prints a block per message; --format json prints one JSON
object per line: {"id","topic","key","attempt","metadata","payload"}, with
"payload_base64" instead of "payload" when the payload is not UTF-8 text.

Exits 0 when --count was reached, when no message arrived for --idle (the
topic is drained for the group: "relay consume URL T --group G --idle 5s"
prints what is there and returns), or when no --count was given and the
command was stopped; 1 when --timeout passed before --count was reached or
the subscription failed.`)
	group := fs.String("group", "", "consumer `group` (or group= in the URL; not for sqs://)")
	count := fs.Int("count", 0, "stop after this many messages (0: until stopped)")
	ack := fs.Bool("ack", true, "ack each printed message")
	noAck := fs.Bool("no-ack", false, "do not settle messages: they go back to the group at exit")
	format := fs.String("format", "text", "text or json")
	timeout := fs.Duration("timeout", 0, "stop after this long (0: no limit)")
	idle := fs.Duration("idle", 0, "stop, with exit 0, when no message arrived for this long (0: never)")
	verbose := fs.Bool("v", false, "log adapter events at debug level")
	if code, ok := parse(fs, args, 2, 2); !ok {
		return code
	}
	clientLogger(e, *verbose)
	if code, ok := refuseInProcess(e, "consume", fs.pos[0]); !ok {
		return code
	}
	if *format != "text" && *format != "json" {
		return usageErr(e, "consume", "--format must be text or json")
	}
	if *count < 0 {
		return usageErr(e, "consume", "--count must not be negative")
	}
	if *idle < 0 || *timeout < 0 {
		return usageErr(e, "consume", "--idle and --timeout must not be negative")
	}
	if *noAck && flagWasSet(fs, "ack") && *ack {
		return usageErr(e, "consume", "--ack and --no-ack contradict each other")
	}
	doAck := *ack && !*noAck
	rawURL, code, ok := groupURL(e, "consume", fs.pos[0], *group)
	if !ok {
		return code
	}
	topic := fs.pos[1]
	if code, ok := checkTopic(e, "consume", topic); !ok {
		return code
	}

	ctx, cancel := signalContext()
	defer cancel()
	if *timeout > 0 {
		var c context.CancelFunc
		ctx, c = context.WithTimeout(ctx, *timeout)
		defer c()
	}
	sub, err := relay.OpenSubscriber(ctx, rawURL)
	if err != nil {
		return failed(e, "consume", err)
	}
	defer sub.Close()
	subCtx, stopSub := context.WithCancel(context.Background())
	defer stopSub()
	ch, err := sub.Subscribe(subCtx, topic)
	if err != nil {
		return failed(e, "consume", err)
	}
	out := bufio.NewWriter(e.stdout)
	defer out.Flush()
	// idleT fires after --idle without a message; without --idle, never.
	idleT := time.NewTimer(*idle)
	defer idleT.Stop()
	var idleC <-chan time.Time
	if *idle > 0 {
		idleC = idleT.C
	}
	n := 0
	for *count == 0 || n < *count {
		select {
		case <-idleC:
			out.Flush()
			fmt.Fprintf(e.stderr, "relay consume: no message for %v; %d message(s)\n", *idle, n)
			return exitOK
		case <-ctx.Done():
			out.Flush()
			if *count > 0 && ctx.Err() == context.DeadlineExceeded {
				fmt.Fprintf(e.stderr, "relay consume: timeout after %d of %d message(s)\n", n, *count)
				return exitFailure
			}
			return exitOK
		case m, ok := <-ch:
			if !ok {
				out.Flush()
				fmt.Fprintf(e.stderr, "relay consume: subscription ended after %d message(s)\n", n)
				return exitFailure
			}
			n++
			idleT.Reset(*idle)
			if *format == "json" {
				writeJSON(out, m)
			} else {
				writeText(out, m, n)
			}
			// Flush before acking, so that a printed message is never
			// lost by an ack that raced a crash of the pipe reader.
			if err := out.Flush(); err != nil {
				fmt.Fprintf(e.stderr, "relay consume: writing: %v\n", err)
				return exitFailure
			}
			if doAck {
				if err := m.Ack(); err != nil {
					fmt.Fprintf(e.stderr, "relay consume: ack %s: %v\n", m.ID, err)
				}
			}
		}
	}
	// Give the acks a moment to reach the broker: Close flushes them.
	return exitOK
}

type jsonMessage struct {
	ID            string            `json:"id"`
	Topic         string            `json:"topic"`
	Key           string            `json:"key,omitempty"`
	Attempt       int               `json:"attempt"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	Payload       *string           `json:"payload,omitempty"`
	PayloadBase64 *string           `json:"payload_base64,omitempty"`
}

func writeJSON(w io.Writer, m *relay.Message) {
	jm := jsonMessage{ID: m.ID, Topic: m.Topic(), Key: m.Key, Attempt: m.Attempt(), Metadata: m.Metadata}
	if utf8.Valid(m.Payload) {
		s := string(m.Payload)
		jm.Payload = &s
	} else {
		s := base64.StdEncoding.EncodeToString(m.Payload)
		jm.PayloadBase64 = &s
	}
	b, _ := json.Marshal(jm)
	_, _ = w.Write(append(b, '\n'))
}

func writeText(w io.Writer, m *relay.Message, n int) {
	fmt.Fprintf(w, "--- message %d ---\nid:       %s\ntopic:    %s\n", n, m.ID, m.Topic())
	if m.Key != "" {
		fmt.Fprintf(w, "key:      %s\n", m.Key)
	}
	fmt.Fprintf(w, "attempt:  %d\n", m.Attempt())
	if t, ok := idTime(m.ID); ok {
		fmt.Fprintf(w, "created:  %s\n", t.UTC().Format(time.RFC3339Nano))
	}
	if len(m.Metadata) > 0 {
		keys := make([]string, 0, len(m.Metadata))
		for k := range m.Metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintln(w, "metadata:")
		for _, k := range keys {
			fmt.Fprintf(w, "  %s: %s\n", k, printable(m.Metadata[k]))
		}
	}
	if printableText(m.Payload) {
		fmt.Fprintf(w, "payload (%d bytes):\n%s\n", len(m.Payload), m.Payload)
	} else {
		fmt.Fprintf(w, "payload (%d bytes, binary, Go-quoted):\n%s\n", len(m.Payload), strconv.Quote(string(m.Payload)))
	}
}

// printableText reports whether b is UTF-8 without control characters
// other than newline, carriage return and tab.
func printableText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if r < 0x20 && r != '\n' && r != '\r' && r != '\t' || r == 0x7f {
			return false
		}
	}
	return true
}

func printable(s string) string {
	if printableText([]byte(s)) && !containsNewline(s) {
		return s
	}
	return strconv.Quote(s)
}

func containsNewline(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' || s[i] == '\r' {
			return true
		}
	}
	return false
}

// idTime returns the time in a UUIDv7 ID.
func idTime(id string) (time.Time, bool) {
	if len(id) != 36 || id[14] != '7' || id[8] != '-' {
		return time.Time{}, false
	}
	ms, err := strconv.ParseInt(id[0:8]+id[9:13], 16, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}
