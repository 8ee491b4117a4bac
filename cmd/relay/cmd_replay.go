package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-relay/relay"
)

// Metadata written by the router's PoisonQueue middleware
// (middleware.PoisonTopicKey and its siblings, all with this prefix).
const (
	poisonTopicKey      = "relay-poison-topic"
	poisonOriginalIDKey = "relay-poison-original-id"
	poisonHandlerKey    = "relay-poison-handler"
	poisonGroupKey      = "relay-poison-group"
	poisonKeyPrefix     = "relay-poison-"
)

const replayHelp = `
Move messages from a poison topic back to the topic they failed on, as
recorded by the PoisonQueue middleware in the metadata key
relay-poison-topic. A message is published with the ID it had before it
was poisoned (relay-poison-original-id), the same Key, Payload and
metadata, minus the relay-poison-* keys unless --keep-metadata, to --to
(default: URL without group=), and only then are its poison copies acked.

When several groups of a topic fail one message, the poison topic holds a
copy from each (the checkout demo's three services, say). By default a
message is replayed once per original ID: published once to its origin
topic, which every group of that topic reads, and every copy of it that
this run reads is acked. Copies of one ID whose payload or Key differ are
reported and left on the poison topic. With --per-group each copy goes back
to the group that failed it (relay-poison-group), and only to it: where the
broker can deliver to one group (RabbitMQ: to the group's queue;
PostgreSQL: a delivery for that group; SNS: to the group's SQS queue).
Kafka, Redis Streams and NATS cannot (their groups read one log), nor can
sqs:// (the queue is the group): there --per-group is refused.

Publishing is limited to --rate messages per second so that a fixed
consumer is not flooded. The command ends after --count messages were
replayed, or when no message arrived for --idle. A message without
relay-poison-topic is left on the poison topic (released at exit) unless
--topic names the destination for all.

With --dry-run nothing is published or acked: when the command ends it
prints each original ID it would replay, with its copies.

Example:
  relay replay redis://127.0.0.1:6379/0 orders.poison --group replay --rate 50`

func runReplay(e *env, args []string) int {
	fs := newFlagSet(e, "replay", "URL POISON_TOPIC", replayHelp)
	group := fs.String("group", "", "consumer `group` on the poison topic (or group= in the URL; not for sqs://)")
	to := fs.String("to", "", "`URL` to publish to (default: URL without group=)")
	topic := fs.String("topic", "", "publish every message to this `topic` instead of its recorded origin")
	rate := fs.Float64("rate", 100, "messages per second (0: no limit)")
	count := fs.Int("count", 0, "stop after this many messages were replayed (0: until idle)")
	idle := fs.Duration("idle", 10*time.Second, "stop when no message arrived for this long")
	keep := fs.Bool("keep-metadata", false, "keep the relay-poison-* metadata keys")
	perGroup := fs.Bool("per-group", false, "send each poison copy back to the group that failed it, not to the whole topic")
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
	pub, err := relay.OpenPublisher(openCtx, dstURL)
	if err != nil {
		return failed(e, "replay", err)
	}
	defer pub.Close()
	rp := &replayer{e: e, pub: pub, poisonTopic: poisonTopic, topic: *topic, keep: *keep, dry: *dry,
		perGroup: *perGroup, done: map[replayKey]*replayed{}}
	if *perGroup {
		if code, ok := rp.checkPerGroup(dstURL); !ok {
			return code
		}
		fmt.Fprintln(e.stderr, "relay replay: per group (--per-group): each poison copy goes back to the group that failed it, on its origin topic; the topic's other groups do not see it again")
	} else {
		fmt.Fprintln(e.stderr, "relay replay: once per original ID: each message goes back once to its origin topic, which every group of that topic reads, and all its poison copies are acked (--per-group sends each copy to its own group instead)")
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
	idleT := time.NewTimer(*idle)
	defer idleT.Stop()
	code = exitOK
loop:
	for *count == 0 || rp.replayed < *count {
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
			wait := func() bool { // the rate limit, before each publish
				if interval <= 0 {
					return true
				}
				if d := time.Until(next); d > 0 {
					select {
					case <-time.After(d):
					case <-ctx.Done():
						return false
					}
				}
				// Allow a burst of at most one second after a pause.
				if floor := time.Now().Add(-time.Second); next.Before(floor) {
					next = floor
				}
				next = next.Add(interval)
				return true
			}
			if !rp.handle(ctx, m, wait) {
				code = exitFailure
				break loop
			}
		}
	}
	rp.summary()
	// End the subscription first, so that its acks are at the broker when
	// the lag is asked; what it held goes back to the group.
	stopSub()
	for range ch {
	}
	if code == exitOK && !rp.checkNoneBehind(sub) {
		code = exitFailure
	}
	return code
}

// checkNoneBehind reports false, saying why, when copies that the run held
// unsettled (listed by a dry run, or left on the topic) may have kept
// others from it: a subscription delivers at most its window (inflight=)
// of unsettled messages, so a run that holds that many sees nothing
// more. It asks the group's lag where the subscriber can tell it.
func (rp *replayer) checkNoneBehind(sub relay.Subscriber) bool {
	held := rp.left
	if rp.dry {
		for _, r := range rp.order {
			held += r.copies
		}
	}
	lr, ok := sub.(relay.LagReporter)
	if held == 0 || !ok {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lag, err := lr.Lag(ctx, rp.poisonTopic)
	if err != nil || lag <= int64(held) {
		return true
	}
	fmt.Fprintf(rp.e.stderr, "relay replay: %s holds %d copies not acked, of which this run saw %d: the ones it held unsettled (listed or left) filled the subscription's window, so it saw no more; "+
		"raise inflight= in the URL to see them, or move the ones left with --topic\n", rp.poisonTopic, lag, held)
	return false
}

// replayKey identifies one replay: an original ID to a destination topic,
// and with --per-group to one group.
type replayKey struct{ id, topic, group string }

// replayed is what a run knows of one replay: the first copy read and
// what the other copies must agree with.
type replayed struct {
	key      replayKey
	copyID   string
	sum      [sha256.Size]byte // of Key and Payload
	handlers []string
	copies   int
	reason   string
}

// replayer replays the copies of one poison topic; see replayHelp.
type replayer struct {
	e           *env
	pub         relay.Publisher
	poisonTopic string
	topic       string // --topic
	keep, dry   bool
	perGroup    bool

	done     map[replayKey]*replayed
	order    []*replayed // first seen first, for the dry run
	replayed int         // originals published (or, dry, to be)
	acked    int         // copies acked without a publish of their own
	left     int         // copies left on the poison topic
	perTopic map[string]int
}

// checkPerGroup refuses --per-group where the destination cannot deliver
// to one group.
func (rp *replayer) checkPerGroup(dstURL string) (int, bool) {
	_, ok := rp.pub.(relay.GroupPublisher)
	caps, _ := rp.pub.(relay.CapabilityReporter)
	if ok && caps != nil && caps.Capabilities().PublishToGroup {
		return exitOK, true
	}
	backend := "this backend"
	if caps != nil {
		backend = caps.Capabilities().Backend
	}
	return usageErr(rp.e, "replay", fmt.Sprintf("--per-group: %s (%s) cannot deliver a message to one group of a topic: its groups read one log, or it has no way to name one; "+
		"replay without --per-group, once per original ID, and let the groups that handled it already skip it (middleware.Dedup)", backend, relay.Redact(dstURL))), false
}

// handle replays (or, dry, notes) poison copy m; wait applies the rate
// limit before a publish and reports false when the command is stopping.
// It returns false when the run must end (a publish failed).
func (rp *replayer) handle(ctx context.Context, m *relay.Message, wait func() bool) bool {
	e := rp.e
	dest := rp.topic
	if dest == "" {
		dest = m.Metadata[poisonTopicKey]
	}
	if dest == "" {
		rp.left++
		fmt.Fprintf(e.stderr, "relay replay: message %s has no %s; left on %s (use --topic)\n", m.ID, poisonTopicKey, rp.poisonTopic)
		return true
	}
	orig := m.Metadata[poisonOriginalIDKey]
	if orig == "" {
		orig = m.ID // not a PoisonQueue copy: replayed as it is
	}
	k := replayKey{id: orig, topic: dest}
	if rp.perGroup {
		k.group = m.Metadata[poisonGroupKey]
		if k.group == "" {
			rp.left++
			fmt.Fprintf(e.stderr, "relay replay: copy %s of %s has no %s (poisoned outside a router, or by a relay that did not record groups); left on %s (replay it without --per-group)\n",
				m.ID, orig, poisonGroupKey, rp.poisonTopic)
			return true
		}
	}
	sum := sha256.Sum256(append([]byte(m.Key+"\x00"), m.Payload...))
	handler := m.Metadata[poisonHandlerKey]
	if prev := rp.done[k]; prev != nil {
		if sum != prev.sum {
			rp.left++
			fmt.Fprintf(e.stderr, "relay replay: warning: the poison copies of %s disagree: copy %s (handler %q) has another Key or payload than copy %s (handler %q), the one replayed; left on %s\n",
				orig, m.ID, handler, prev.copyID, prev.handlers[0], rp.poisonTopic)
			return true
		}
		prev.copies++
		prev.handlers = append(prev.handlers, handler)
		if rp.dry {
			return true
		}
		if err := m.Ack(); err != nil {
			fmt.Fprintf(e.stderr, "relay replay: ack %s: %v\n", m.ID, err)
		}
		rp.acked++
		fmt.Fprintf(e.stdout, "acked copy %s of %s (handler %q): replayed to %s already\n", m.ID, orig, handler, dest)
		return true
	}
	r := &replayed{key: k, copyID: m.ID, sum: sum, handlers: []string{handler}, copies: 1, reason: m.Metadata[poisonKeyPrefix+"reason"]}
	if rp.dry {
		rp.done[k] = r
		rp.order = append(rp.order, r)
		rp.count(dest)
		return true
	}
	if !wait() {
		return false
	}
	c := m.Copy()
	c.ID = orig
	if !rp.keep {
		for key := range c.Metadata {
			if strings.HasPrefix(key, poisonKeyPrefix) {
				delete(c.Metadata, key)
			}
		}
	}
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	var err error
	if rp.perGroup {
		err = rp.pub.(relay.GroupPublisher).PublishToGroup(pctx, dest, k.group, c)
	} else {
		err = rp.pub.Publish(pctx, dest, c)
	}
	pcancel()
	if err != nil {
		fmt.Fprintf(e.stderr, "relay replay: publishing %s to %s%s: %v (left on %s)\n", c.ID, dest, forGroup(k.group), err, rp.poisonTopic)
		_ = m.Nack()
		return false
	}
	rp.done[k] = r
	if err := m.Ack(); err != nil {
		fmt.Fprintf(e.stderr, "relay replay: ack %s: %v (it was replayed and may be replayed again)\n", m.ID, err)
	}
	rp.count(dest)
	fmt.Fprintf(e.stdout, "replayed %s to %s%s\n", c.ID, dest, forGroup(k.group))
	return true
}

func (rp *replayer) count(dest string) {
	rp.replayed++
	if rp.perTopic == nil {
		rp.perTopic = map[string]int{}
	}
	rp.perTopic[dest]++
}

func forGroup(g string) string {
	if g == "" {
		return ""
	}
	return " for group " + g
}

// summary prints, for a dry run, each original ID with its copies, then
// one line of totals.
func (rp *replayer) summary() {
	e := rp.e
	for _, r := range rp.order {
		fmt.Fprintf(e.stdout, "would replay %s to %s%s: %s (handler %s)", r.key.id, r.key.topic, forGroup(r.key.group),
			copiesText(r.copies), strings.Join(quoteAll(r.handlers), ", "))
		if r.reason != "" {
			fmt.Fprintf(e.stdout, "; reason: %s", oneLineText(r.reason, 200))
		}
		fmt.Fprintln(e.stdout)
	}
	verb := "replayed"
	if rp.dry {
		verb = "would replay"
	}
	copies := rp.replayed + rp.acked
	if rp.dry {
		copies = 0
		for _, r := range rp.order {
			copies += r.copies
		}
	}
	fmt.Fprintf(e.stderr, "%s %d message(s) from %s", verb, rp.replayed, copiesText(copies))
	topics := make([]string, 0, len(rp.perTopic))
	for t := range rp.perTopic {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	for _, t := range topics {
		fmt.Fprintf(e.stderr, "; %d to %s", rp.perTopic[t], t)
	}
	if rp.left > 0 {
		fmt.Fprintf(e.stderr, "; %d left on %s", rp.left, rp.poisonTopic)
	}
	fmt.Fprintln(e.stderr)
}

func copiesText(n int) string {
	if n == 1 {
		return "1 poison copy"
	}
	return fmt.Sprintf("%d poison copies", n)
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// oneLineText is s on one line, cut to about n bytes.
func oneLineText(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
