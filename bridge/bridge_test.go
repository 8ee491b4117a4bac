package bridge_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/bridge"
	"github.com/go-relay/relay/middleware"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sqsSvc != nil {
		sqsSvc.Stop()
	}
	if relayBinPath != "" { // built by BenchmarkReplicas
		_ = os.RemoveAll(filepath.Dir(relayBinPath))
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func uniq(prefix string) string { return prefix + "-" + relay.NewID()[24:] }

// runBridge starts b and returns a stop function that drains it and
// returns Run's error.
func runBridge(t *testing.T, b *bridge.Bridge) func() error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for b.Ready() != nil {
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("bridge not ready: %v", b.Ready())
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopped := false
	var err error
	stop := func() error {
		if !stopped {
			stopped = true
			cancel()
			err = <-done
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// consume reads n messages of topic in group from url, acking them.
func consume(t *testing.T, url, group, topic string, n int) []*relay.Message {
	t.Helper()
	sub, err := relay.OpenSubscriber(context.Background(), url+"?group="+group)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []*relay.Message
	for len(out) < n {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatalf("got %d of %d messages", len(out), n)
			}
			_ = m.Ack()
			out = append(out, m)
		case <-ctx.Done():
			t.Fatalf("got %d of %d messages", len(out), n)
		}
	}
	return out
}

func publish(t *testing.T, url, topic string, msgs ...*relay.Message) {
	t.Helper()
	pub, err := relay.OpenPublisher(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Publish(context.Background(), topic, msgs...); err != nil {
		t.Fatal(err)
	}
}

// provision makes the group exist so that nothing published is missed.
func provision(t *testing.T, url, group, topic string) {
	t.Helper()
	sub, err := relay.OpenSubscriber(context.Background(), url+"?group="+group)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if p, ok := sub.(relay.Provisioner); ok {
		if err := p.Provision(context.Background(), topic); err != nil {
			t.Fatal(err)
		}
	}
}

func TestForwardsUnchangedWithRename(t *testing.T) {
	a, b := "mem://"+uniq("a"), "mem://"+uniq("b")
	br, err := bridge.New(bridge.Config{Routes: []bridge.Route{{
		Name: "r",
		From: bridge.Source{URL: a, Topic: "in", Group: "bridge"},
		To:   bridge.Destination{URL: b, Topic: "out"},
	}}}, bridge.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	provision(t, b, "reader", "out")
	stop := runBridge(t, br)

	large := bytes.Repeat([]byte{0, 1, 2, 0xff}, 256<<10)
	md := relay.Metadata{"ünïcode": "välue ✓", "empty": ""}
	for i := range 40 {
		md["k"+string(rune('a'+i%26))+string(rune('a'+i/26))] = strings.Repeat("v", i)
	}
	in := []*relay.Message{
		{ID: relay.NewID(), Key: "k1", Payload: []byte{0, 0xfe, 0xff, 0x80}},
		{ID: relay.NewID(), Payload: nil},
		{ID: relay.NewID(), Key: "ключ", Metadata: md, Payload: []byte("héllo wörld 🌍")},
		{ID: relay.NewID(), Payload: large},
	}
	publish(t, a, "in", in...)
	got := consume(t, b, "reader", "out", len(in))
	byID := map[string]*relay.Message{}
	for _, m := range got {
		byID[m.ID] = m
	}
	for _, w := range in {
		g := byID[w.ID]
		if g == nil {
			t.Fatalf("message %s not forwarded", w.ID)
		}
		if g.Key != w.Key || !bytes.Equal(g.Payload, w.Payload) {
			t.Errorf("message %s changed: key %q payload %d bytes", w.ID, g.Key, len(g.Payload))
		}
		if g.Metadata[bridge.HopsKey] == "" {
			t.Errorf("message %s has no hop marker", w.ID)
		}
		if len(g.Metadata) != len(w.Metadata)+1 {
			t.Errorf("message %s metadata has %d keys, want %d", w.ID, len(g.Metadata), len(w.Metadata)+1)
		}
		for k, v := range w.Metadata {
			if g.Metadata[k] != v {
				t.Errorf("message %s metadata %q = %q, want %q", w.ID, k, g.Metadata[k], v)
			}
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("drain: %v", err)
	}
}

// TestOppositeRoutesDoNotLoop runs A→B and B→A at once, as in a
// migration, in two bridges: each message reaches the other side once and
// never comes back.
func TestOppositeRoutesDoNotLoop(t *testing.T) {
	a, b := "mem://"+uniq("a"), "mem://"+uniq("b")
	mk := func(name, from, to string) *bridge.Bridge {
		br, err := bridge.New(bridge.Config{Name: name, HTTP: bridge.HTTPConfig{Disabled: true}, Routes: []bridge.Route{{
			Name: name, From: bridge.Source{URL: from, Topic: "t", Group: "bridge"},
			To: bridge.Destination{URL: to},
		}}}, bridge.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		return br
	}
	ab, ba := mk("ab", a, b), mk("ba", b, a)
	provision(t, a, "app", "t")
	provision(t, b, "app", "t")
	stopAB, stopBA := runBridge(t, ab), runBridge(t, ba)

	fromA := relay.NewMessage([]byte("from a"))
	fromB := relay.NewMessage([]byte("from b"))
	publish(t, a, "t", fromA)
	publish(t, b, "t", fromB)
	// Each side's app group sees its own message and the other side's
	// once; a sentinel published after proves nothing else came.
	gotB := consume(t, b, "app", "t", 2)
	gotA := consume(t, a, "app", "t", 2)
	sentinel := relay.NewMessage([]byte("sentinel"))
	if err := stopAB(); err != nil {
		t.Fatal(err)
	}
	if err := stopBA(); err != nil {
		t.Fatal(err)
	}
	publish(t, a, "t", sentinel)
	publish(t, b, "t", sentinel)
	for side, got := range map[string][]*relay.Message{"a": gotA, "b": gotB} {
		ids := map[string]bool{}
		for _, m := range got {
			ids[m.ID] = true
		}
		if !ids[fromA.ID] || !ids[fromB.ID] {
			t.Errorf("side %s got %v, want both messages", side, ids)
		}
		url := a
		if side == "b" {
			url = b
		}
		if rest := consume(t, url, "app", "t", 1); rest[0].ID != sentinel.ID {
			t.Errorf("side %s got an extra message %s (%s): a loop", side, rest[0].ID, rest[0].Payload)
		}
	}
}

func TestReadyzAndMetrics(t *testing.T) {
	a, b := "mem://"+uniq("a"), "mem://"+uniq("b")
	br, err := bridge.New(bridge.Config{Routes: []bridge.Route{{
		Name: "orders", From: bridge.Source{URL: a, Topic: "t", Group: "g"}, To: bridge.Destination{URL: b},
	}}}, bridge.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(br.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "route orders: connecting") {
		t.Errorf("before Run: /readyz = %d %q", code, body)
	}
	provision(t, b, "r", "t")
	stop := runBridge(t, br)
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("running: /readyz = %d", code)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz = %d", code)
	}
	publish(t, a, "t", relay.NewMessage([]byte("x")), relay.NewMessage([]byte("y")))
	consume(t, b, "r", "t", 2)
	// The copies can arrive before the route counted them: wait.
	wants := []string{
		`relay_bridge_forwarded_total{route="orders"} 2`,
		`relay_bridge_forward_seconds_count{route="orders"} 2`,
		`relay_bridge_in_flight{route="orders"} 0`,
		`relay_bridge_endpoint_up{end="source",route="orders"} 1`,
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		_, metrics := get("/metrics")
		var missing []string
		for _, want := range wants {
			if !strings.Contains(metrics, want) {
				missing = append(missing, want)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks %q after 30s", missing)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if code, _ := get("/readyz"); code != 503 {
		t.Errorf("after drain: /readyz = %d", code)
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	_, err := bridge.New(bridge.Config{}, bridge.Options{})
	var ce *bridge.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v", err)
	}
}

func TestCheckReportsEachEndpoint(t *testing.T) {
	cfg := bridge.Config{Routes: []bridge.Route{{
		Name: "r", From: bridge.Source{URL: "mem://x?inflight=0", Topic: "t", Group: "g"},
		To: bridge.Destination{URL: "mem://y"}, Poison: &bridge.Poison{Topic: "p", URL: "mem://x"},
	}}}
	st := bridge.Check(context.Background(), cfg)
	if len(st) != 3 {
		t.Fatalf("statuses = %+v", st)
	}
	if st[0].End != "source" || st[0].Err == nil || !errors.Is(st[0].Err, relay.ErrBadURL) {
		t.Errorf("source = %+v", st[0])
	}
	if st[1].End != "destination" || st[1].Err != nil || st[2].End != "poison" || st[2].Err != nil {
		t.Errorf("statuses = %+v", st)
	}
}

// TestPoisonsRejectedMessages: a message the destination rejects for good
// (too large) goes to the poison topic on the source broker with the
// PoisonQueue metadata; the others are forwarded.
func TestPoisonsRejectedMessages(t *testing.T) {
	a, b := "mem://"+uniq("a"), "mem://"+uniq("b")
	br, err := bridge.New(bridge.Config{Routes: []bridge.Route{{
		Name:   "r",
		From:   bridge.Source{URL: a + "?group=bridge", Topic: "in"},
		To:     bridge.Destination{URL: b + "?max_bytes=1000", Topic: "out"},
		Poison: &bridge.Poison{Topic: "in.poison"},
	}}}, bridge.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	provision(t, b, "reader", "out")
	provision(t, a, "ops", "in.poison")
	stop := runBridge(t, br)
	small, big := relay.NewMessage([]byte("ok")), relay.NewMessage(bytes.Repeat([]byte("x"), 5000))
	publish(t, a, "in", big, small)
	if got := consume(t, b, "reader", "out", 1); got[0].ID != small.ID {
		t.Errorf("forwarded %s, want %s", got[0].ID, small.ID)
	}
	p := consume(t, a, "ops", "in.poison", 1)[0]
	if p.ID != middleware.PoisonID(big.ID, "r", "in") || p.Metadata[middleware.PoisonOriginalIDKey] != big.ID || len(p.Payload) != 5000 || p.Metadata["relay-poison-topic"] != "in" || p.Metadata["relay-poison-handler"] != "r" {
		t.Errorf("poisoned %s (%d bytes) with %v", p.ID, len(p.Payload), p.Metadata)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestDedupSkipsRepeatedIDs: a message published twice with the same ID is
// forwarded once.
func TestDedupSkipsRepeatedIDs(t *testing.T) {
	a, b := "mem://"+uniq("a"), "mem://"+uniq("b")
	br, err := bridge.New(bridge.Config{Routes: []bridge.Route{{
		Name: "r", From: bridge.Source{URL: a, Topic: "t", Group: "g"}, To: bridge.Destination{URL: b},
		Dedup: &bridge.Dedup{}, Concurrency: 1,
	}}}, bridge.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	provision(t, b, "reader", "t")
	stop := runBridge(t, br)
	m := relay.NewMessage([]byte("once"))
	dup := m.Copy()
	last := relay.NewMessage([]byte("last"))
	publish(t, a, "t", m, dup, last)
	got := consume(t, b, "reader", "t", 2)
	if got[0].ID != m.ID || got[1].ID != last.ID {
		t.Errorf("forwarded %s, %s; want %s then %s", got[0].ID, got[1].ID, m.ID, last.ID)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
