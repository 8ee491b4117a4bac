package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/bridge"
)

func runVerify(e *env, args []string) int {
	fs := newFlagSet(e, "verify", "", `
Compare a route's source and destination over a window of time (parity
check, docs/migration.md): the messages the source keeps whose stored time
is in [--since, --until), against those the destination keeps from --since
to --until plus --grace (the forwarding delay). Messages are matched by ID;
payloads and keys by hash. Neither side is consumed: both are read as
history (relay.HistoryReader), which Kafka, Redis Streams, NATS JetStream
and PostgreSQL (while some group still holds the rows) keep; RabbitMQ and
SQS keep none.

Reports, per route: the source and destination counts; missing (source
IDs the destination lacks); extra (destination IDs the source window
lacks: near the window's edges these include messages stored at the
source just before --since); mismatched (same ID, other payload or key);
and IDs the destination holds more than once. Where the source keeps no
history, --expect FILE (one ID a line, e.g. the producer's log) gives the
IDs it should have; without it only the destination side is checked, and
--http ADDR adds the running bridge's counts for the route.

Routes come from -c FILE (all, or --route NAME), or from --from URL
--topic T --to URL [--to-topic T]. The source is read with the route's
group in its URL (reading changes no group); the destination with group
relay-verify where its URL needs one.

Exits 0 when nothing is missing or mismatched, 1 otherwise (or when a
side cannot be read), 2 on a usage error, 3 on an invalid config.`)
	cfgPath := fs.String("c", "", "bridge config `file` whose routes to verify")
	routeName := fs.String("route", "", "verify only the route `name`d (with -c)")
	from := fs.String("from", "", "source `URL` (without -c)")
	topic := fs.String("topic", "", "source `topic` (without -c)")
	to := fs.String("to", "", "destination `URL` (without -c)")
	toTopic := fs.String("to-topic", "", "destination `topic` (default: --topic)")
	sinceFlag := fs.String("since", "", "window start: RFC 3339 `time`, or a duration ago such as 15m (default: oldest kept)")
	untilFlag := fs.String("until", "", "window end (exclusive): RFC 3339 `time` or a duration ago (default: now)")
	grace := fs.Duration("grace", time.Minute, "how much later than --until the destination is read, for the forwarding delay")
	expect := fs.String("expect", "", "`file` of IDs the source had, one a line, for a source without history")
	httpAddr := fs.String("http", "", "`address` of the running bridge's HTTP endpoint, to add its counts")
	show := fs.Int("show", 20, "how many IDs of each kind to list")
	timeout := fs.Duration("timeout", 5*time.Minute, "bound for the whole check")
	if code, ok := parse(fs, args, 0, 0); !ok {
		return code
	}
	now := time.Now()
	var w relay.Window
	var err error
	if w.Since, err = parseWhen(*sinceFlag, now); err != nil {
		return usageErr(e, "verify", "--since: "+err.Error())
	}
	if w.Until, err = parseWhen(*untilFlag, now); err != nil {
		return usageErr(e, "verify", "--until: "+err.Error())
	}
	if w.Until.IsZero() {
		w.Until = now
	}
	if !w.Since.IsZero() && !w.Since.Before(w.Until) {
		return usageErr(e, "verify", "--since must be before --until")
	}
	var routes []bridge.Route
	switch {
	case *cfgPath != "":
		if *from != "" || *to != "" || *topic != "" {
			return usageErr(e, "verify", "give either -c FILE or --from/--topic/--to, not both")
		}
		cfg, code := loadConfig(e, *cfgPath)
		if cfg == nil {
			return code
		}
		for _, r := range cfg.WithDefaults().Routes {
			if *routeName == "" || r.Name == *routeName {
				routes = append(routes, r)
			}
		}
		if len(routes) == 0 {
			return usageErr(e, "verify", fmt.Sprintf("%s has no route %q", *cfgPath, *routeName))
		}
	case *from != "" && *to != "" && *topic != "":
		r := bridge.Route{Name: "verify", From: bridge.Source{URL: *from, Topic: *topic}, To: bridge.Destination{URL: *to, Topic: *toTopic}}
		if r.To.Topic == "" {
			r.To.Topic = *topic
		}
		routes = append(routes, r)
	default:
		return usageErr(e, "verify", "give -c FILE, or --from URL --topic T --to URL")
	}
	var expected []string
	if *expect != "" {
		if expected, err = readIDs(*expect); err != nil {
			return usageErr(e, "verify", "--expect: "+err.Error())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	code := exitOK
	for _, r := range routes {
		v := verifier{e: e, route: r, w: w, grace: *grace, expected: expected, show: *show, http: *httpAddr}
		if c := v.run(ctx); c != exitOK {
			code = c
		}
	}
	return code
}

// parseWhen reads an RFC 3339 time or a duration before now; "" is the
// zero time.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time (2026-01-02T15:04:05Z) or a duration ago (15m)", s)
	}
	return now.Add(-d), nil
}

// readIDs reads one ID a line from file, skipping blank lines.
func readIDs(file string) ([]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ids []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if id := strings.TrimSpace(sc.Text()); id != "" {
			ids = append(ids, id)
		}
	}
	return ids, sc.Err()
}

// digest identifies a message's key and payload.
type digest [16]byte

func digestOf(m *relay.Message) digest {
	h := sha256.New()
	_, _ = io.WriteString(h, m.Key)
	h.Write([]byte{0})
	h.Write(m.Payload)
	var d digest
	copy(d[:], h.Sum(nil))
	return d
}

// verifier checks one route.
type verifier struct {
	e        *env
	route    bridge.Route
	w        relay.Window
	grace    time.Duration
	expected []string
	show     int
	http     string
}

// side is what was read of one end.
type side struct {
	read   bool   // history was read
	why    string // why not
	count  int
	digest map[string]digest
	seen   map[string]int // copies per ID
}

func (v *verifier) run(ctx context.Context) int {
	r, out := v.route, v.e.stdout
	fmt.Fprintf(out, "route %s: %s %s -> %s %s\n", r.Name, relay.Redact(r.From.URL), r.From.Topic, relay.Redact(r.To.URL), r.To.Topic)
	since := "the oldest message kept"
	if !v.w.Since.IsZero() {
		since = v.w.Since.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(out, "  window       %s to %s (destination read %v longer)\n", since, v.w.Until.UTC().Format(time.RFC3339), v.grace)

	srcURL, err := subscriberURL(r.From.URL, sourceGroupOf(r.From))
	if err != nil {
		return usageErr(v.e, "verify", err.Error())
	}
	src, err := v.read(ctx, srcURL, "relay-verify", r.From.Topic, v.w)
	if err != nil {
		return failed(v.e, "verify", fmt.Errorf("route %s: source: %w", r.Name, err))
	}
	dw := v.w
	dw.Until = v.w.Until.Add(v.grace)
	dst, err := v.read(ctx, r.To.URL, "relay-verify", r.To.Topic, dw)
	if err != nil {
		return failed(v.e, "verify", fmt.Errorf("route %s: destination: %w", r.Name, err))
	}
	if !dst.read {
		fmt.Fprintf(v.e.stderr, "relay verify: route %s: the destination keeps no history to compare (%s); nothing can be verified there\n", r.Name, dst.why)
		return exitFailure
	}
	want := map[string]bool{}
	switch {
	case src.read:
		fmt.Fprintf(out, "  source       %d messages, %d IDs (history read)\n", src.count, len(src.seen))
		for id := range src.seen {
			want[id] = true
		}
	case v.expected != nil:
		fmt.Fprintf(out, "  source       no history (%s); %d IDs expected from --expect\n", src.why, len(v.expected))
		for _, id := range v.expected {
			want[id] = true
		}
	default:
		fmt.Fprintf(out, "  source       no history (%s): missing IDs cannot be told; pass --expect FILE, or see the bridge's counts (--http)\n", src.why)
	}
	twice := 0
	for _, n := range dst.seen {
		if n > 1 {
			twice++
		}
	}
	fmt.Fprintf(out, "  destination  %d messages, %d IDs, %d IDs more than once\n", dst.count, len(dst.seen), twice)
	var missing, extra, mismatched []string
	for id := range want {
		if _, ok := dst.seen[id]; !ok {
			missing = append(missing, id)
		}
	}
	if src.read {
		for id, d := range dst.digest {
			sd, ok := src.digest[id]
			switch {
			case !ok:
				extra = append(extra, id)
			case sd != d:
				mismatched = append(mismatched, id)
			}
		}
	}
	if src.read || v.expected != nil {
		v.list("missing", missing)
	}
	if src.read {
		v.list("extra", extra)
		v.list("mismatched", mismatched)
	}
	if v.http != "" {
		v.bridgeCounts()
	}
	if len(missing) > 0 || len(mismatched) > 0 {
		fmt.Fprintf(v.e.stderr, "relay verify: route %s: %d missing, %d mismatched\n", r.Name, len(missing), len(mismatched))
		return exitFailure
	}
	return exitOK
}

// list prints the count of ids and up to show of them, sorted.
func (v *verifier) list(what string, ids []string) {
	slices.Sort(ids)
	fmt.Fprintf(v.e.stdout, "  %-12s %d\n", what, len(ids))
	for i, id := range ids {
		if i == v.show {
			fmt.Fprintf(v.e.stdout, "    ... and %d more\n", len(ids)-i)
			break
		}
		fmt.Fprintf(v.e.stdout, "    %s\n", id)
	}
}

// read reads topic's history in w from the subscriber of raw (with group
// g added where the URL takes one, when g is not ""). A backend without
// history gives a side with read false and the reason.
func (v *verifier) read(ctx context.Context, raw, g, topic string, w relay.Window) (*side, error) {
	sub, err := openReader(ctx, raw, g)
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	s := &side{digest: map[string]digest{}, seen: map[string]int{}}
	hr, ok := sub.(relay.HistoryReader)
	if !ok {
		s.why = "its subscriber cannot read history"
		return s, nil
	}
	err = hr.ReadHistory(ctx, topic, w, func(m relay.Stored) error {
		s.count++
		s.seen[m.Msg.ID]++
		s.digest[m.Msg.ID] = digestOf(m.Msg)
		return nil
	})
	if errors.Is(err, relay.ErrNotSupported) {
		s.why = err.Error()
		return s, nil
	}
	if err != nil {
		return nil, err
	}
	s.read = true
	return s, nil
}

// openReader opens a subscriber of raw for reading history: with group g
// when g is not "" and the URL has none, or as given when the backend
// takes no group (its URL check refuses one).
func openReader(ctx context.Context, raw, g string) (relay.Subscriber, error) {
	if g != "" {
		if u, err := url.Parse(raw); err == nil && u.Query().Get("group") == "" {
			if withG, err := subscriberURL(raw, g); err == nil {
				sub, err := relay.OpenSubscriber(ctx, withG)
				if err == nil || !errors.Is(err, relay.ErrBadURL) {
					return sub, err
				}
			}
		}
	}
	return relay.OpenSubscriber(ctx, raw)
}

// sourceGroupOf is the route's group: Source.Group, or "" when the URL
// has group= (or the backend takes none).
func sourceGroupOf(s bridge.Source) string {
	if s.Group != "" {
		if u, err := url.Parse(s.URL); err == nil && u.Query().Get("group") == s.Group {
			return ""
		}
	}
	return s.Group
}

// bridgeCounts prints the running bridge's counts for the route.
func (v *verifier) bridgeCounts() {
	st, _, err := fetchStatus(v.http, 5*time.Second)
	if err != nil {
		fmt.Fprintf(v.e.stdout, "  bridge       %v\n", err)
		return
	}
	rs, ok := findRoute(st, v.route.Name)
	if !ok {
		fmt.Fprintf(v.e.stdout, "  bridge       %s has no route %s\n", st.Bridge, v.route.Name)
		return
	}
	fmt.Fprintf(v.e.stdout, "  bridge       %s: forwarded %d, failed %d, poisoned %d, duplicates skipped %d, source lag %s (since the bridge started)\n",
		rs.State, rs.Forwarded, rs.Failed, rs.Poisoned, rs.Duplicates, lagText(rs.SourceLag))
}
