package watermill_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/bridge"
)

// relay's bridge forwards both ways between mem:// and a Watermill
// Pub/Sub reached by its watermill+ URL: ID, Key, metadata and payload
// cross unchanged.
func TestBridgeThroughWatermill(t *testing.T) {
	mem := memURL(t)
	const wmURL = "watermill+gochannel-test://"
	suffix := relay.NewID()[24:]
	wmIn, wmOut := "wm-in-"+suffix, "wm-out-"+suffix

	_, memOut := openMem(t, mem, "reader")
	if err := memOut.(relay.Provisioner).Provision(context.Background(), "out"); err != nil {
		t.Fatal(err)
	}
	memPub, _ := openMem(t, mem, "unused")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	raw, err := client{shared}.Subscribe(ctx, wmOut) // what reaches the Watermill side
	if err != nil {
		t.Fatal(err)
	}

	br, err := bridge.New(bridge.Config{HTTP: bridge.HTTPConfig{Disabled: true}, Routes: []bridge.Route{
		{Name: "to-watermill", From: bridge.Source{URL: mem, Topic: "in", Group: "bridge"}, To: bridge.Destination{URL: wmURL, Topic: wmOut}},
		{Name: "from-watermill", From: bridge.Source{URL: wmURL, Topic: wmIn, Group: "bridge"}, To: bridge.Destination{URL: mem, Topic: "out"}},
	}}, bridge.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- br.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for br.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("bridge not ready: %v", br.Ready())
		}
		time.Sleep(10 * time.Millisecond)
	}

	// relay → Watermill
	m := &relay.Message{ID: relay.NewID(), Key: "k1", Metadata: relay.Metadata{"h": "1"}, Payload: []byte("to watermill")}
	if err := memPub.Publish(ctx, "in", m); err != nil {
		t.Fatal(err)
	}
	w := recv(t, raw)
	if w.UUID != m.ID || w.Metadata.Get("relay_key") != "k1" || w.Metadata.Get("h") != "1" || string(w.Payload) != "to watermill" {
		t.Errorf("Watermill received UUID %q metadata %v payload %q", w.UUID, w.Metadata, w.Payload)
	}
	w.Ack()

	// Watermill → relay
	in := message.NewMessage(relay.NewID(), []byte("from watermill"))
	in.Metadata.Set("relay_key", "k2")
	in.Metadata.Set("h", "2")
	if err := shared.Publish(wmIn, in); err != nil {
		t.Fatal(err)
	}
	ch, err := memOut.Subscribe(ctx, "out")
	if err != nil {
		t.Fatal(err)
	}
	got := recv(t, ch)
	if got.ID != in.UUID || got.Key != "k2" || got.Metadata["h"] != "2" || string(got.Payload) != "from watermill" {
		t.Errorf("relay received %+v", got)
	}
	_ = got.Ack()

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("bridge: %v", err)
	}
}
