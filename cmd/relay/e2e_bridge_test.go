package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/bridge"
)

// routeYAML is a bridge config with one route; the source URL carries the
// group.
func routeYAML(name string, from backend, fromTopic, group string, to backend, toTopic string, extra string) string {
	return fmt.Sprintf(`name: e2e-%s
shutdown_timeout: 30s
routes:
  - name: %s
    from:
      url: %q
      topic: %s
    to:
      url: %q
      topic: %s
%s`, name, name, from.subURL(group), fromTopic, to.pubURL, toTopic, extra)
}

// testMessages are the messages every route must carry byte-exact.
func testMessages(large int) []*relay.Message {
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	big := make([]byte, large)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(r.IntN(256))
	}
	many := relay.Metadata{"ключ": "значение", "emoji": "🚀✓", "spaces": "  a b  ", "empty": "", "quote": `"'\`}
	for i := range 40 {
		many[fmt.Sprintf("key-%02d", i)] = strings.Repeat("v", i*7)
	}
	return []*relay.Message{
		{ID: relay.NewID(), Payload: binary, Key: "bin"},
		{ID: relay.NewID(), Payload: nil},
		{ID: relay.NewID(), Payload: []byte{}, Metadata: relay.Metadata{"only": "metadata"}},
		{ID: relay.NewID(), Payload: big, Key: "big"},
		{ID: relay.NewID(), Payload: []byte("héllo wörld — 日本語 — 🌍"), Key: "ключ-ü", Metadata: many},
		{ID: "custom-id-" + id(), Payload: []byte("a foreign ID")},
	}
}

// TestBridgeEveryPair runs the relay binary with a route for every ordered
// pair of cross-process backends and checks that binary, empty, large and
// unicode payloads, keys and many metadata keys arrive byte-exact, with
// only the hop marker added.
func TestBridgeEveryPair(t *testing.T) {
	bs := backends(t)
	for _, from := range bs {
		for _, to := range bs {
			if from.name == to.name {
				continue
			}
			t.Run(from.name+"-to-"+to.name, func(t *testing.T) { bridgePair(t, from, to) })
		}
	}
}

// bridgePair runs the relay binary with one route from -> to and checks
// that testMessages arrive byte-exact, once each, with only the hop marker
// added to their metadata, and that the bridge exits 0 on SIGTERM.
func bridgePair(t *testing.T, from, to backend) {
	run := id()
	in, out := "e2e-in-"+run, "e2e-out-"+run
	provision(t, to, out, "reader-"+run)
	rd := newReader(t, to, out, "reader-"+run)
	br := startBridge(t, routeYAML("pair", from, in, "bridge-"+run, to, out, ""))

	msgs := testMessages(min(from.large, to.large))
	publish(t, from, in, msgs...)
	if !rd.waitUnique(len(msgs), 60*time.Second) {
		t.Fatalf("%d of %d messages arrived; bridge stderr:\n%s", rd.unique(), len(msgs), br.err.String())
	}
	got, counts := rd.snapshot()
	byID := map[string]*relay.Message{}
	for _, m := range got {
		byID[m.ID] = m
	}
	for _, w := range msgs {
		g := byID[w.ID]
		if g == nil {
			t.Errorf("message %s missing", w.ID)
			continue
		}
		if counts[w.ID] != 1 {
			t.Errorf("message %s arrived %d times", w.ID, counts[w.ID])
		}
		if g.Key != w.Key {
			t.Errorf("message %s key %q, want %q", w.ID, g.Key, w.Key)
		}
		if !bytes.Equal(g.Payload, w.Payload) {
			t.Errorf("message %s payload differs: %d bytes, want %d", w.ID, len(g.Payload), len(w.Payload))
		}
		if g.Topic() != out {
			t.Errorf("message %s arrived on %q", w.ID, g.Topic())
		}
		wantMD := w.Metadata.Clone()
		if wantMD == nil {
			wantMD = relay.Metadata{}
		}
		hop := g.Metadata[bridge.HopsKey]
		if len(hop) != 16 {
			t.Errorf("message %s hop marker %q", w.ID, hop)
		}
		wantMD[bridge.HopsKey] = hop
		if len(g.Metadata) != len(wantMD) {
			t.Errorf("message %s has %d metadata keys, want %d: %v", w.ID, len(g.Metadata), len(wantMD), g.Metadata)
		}
		for k, v := range wantMD {
			if gv, ok := g.Metadata[k]; !ok || gv != v {
				t.Errorf("message %s metadata %q = %q (present %v), want %q", w.ID, k, gv, ok, v)
			}
		}
	}
	if v := br.waitMetric(`relay_bridge_forwarded_total{route="pair"}`, float64(len(msgs))); v != float64(len(msgs)) {
		t.Errorf("forwarded_total = %v, want %d", v, len(msgs))
	}
	if code := br.signal(syscall.SIGTERM, 60*time.Second); code != 0 {
		t.Errorf("bridge exit code after SIGTERM = %d, want 0; stderr:\n%s", code, br.err.String())
	}
}
