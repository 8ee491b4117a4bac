package mqtt_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/mqtt"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// mosquittoClient returns the path of mosquitto_pub or mosquitto_sub,
// failing (CI) or skipping when it is not installed.
func mosquittoClient(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if testenv.Required() {
			t.Fatalf("%s is not installed (Debian: apt-get install mosquitto-clients): %v", name, err)
		}
		t.Skipf("SKIP: %s is not installed: %v", name, err)
	}
	return p
}

func hostPort(t *testing.T, raw string) []string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return []string{"-h", u.Hostname(), "-p", u.Port(), "-V", "mqttv311"}
}

// Messages from mosquitto_pub reach a relay subscriber byte-exact as
// plain payloads: ID derived from the payload (the same for identical
// payloads), no Key, no Metadata, attempt 1.
func TestInteropForeignPublisher(t *testing.T) {
	pubBin := mosquittoClient(t, "mosquitto_pub")
	base := mqttURL(t)
	topic, group := newName("interop/in/"), newName("g")
	sub := openSub(t, base, group)
	if err := sub.(relay.Provisioner).Provision(context.Background(), topic); err != nil {
		t.Fatal(err)
	}
	binary := filepath.Join(t.TempDir(), "payload")
	raw := []byte{0, 1, 2, 0xfe, 0xff, '\n'}
	if err := os.WriteFile(binary, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	want := [][]byte{[]byte("reading 21.5"), raw, []byte("reading 21.5")}
	for _, args := range [][]string{{"-m", "reading 21.5"}, {"-f", binary}, {"-m", "reading 21.5"}} {
		cmd := exec.Command(pubBin, append(append(hostPort(t, base), "-q", "1", "-t", topic), args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("mosquitto_pub: %v: %s", err, out)
		}
	}
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range receive(t, ch, len(want)) {
		if !bytes.Equal(m.Payload, want[i]) || m.ID != mqtt.DerivedID(want[i]) || m.Key != "" || len(m.Metadata) != 0 || m.Attempt() != 1 {
			t.Errorf("message %d: ID %s key %q metadata %v payload %q attempt %d; want ID %s and payload %q only",
				i, m.ID, m.Key, m.Metadata, m.Payload, m.Attempt(), mqtt.DerivedID(want[i]), want[i])
		}
		_ = m.Ack()
	}
}

// mosquitto_sub sees what relay publishes: the plain payload with
// envelope=never and for a message whose ID is derived from its payload
// and carries nothing else; the envelope (Magic first) for a message
// with metadata.
func TestInteropForeignSubscriber(t *testing.T) {
	subBin := mosquittoClient(t, "mosquitto_sub")
	base := mqttURL(t)
	topic, id := newName("interop/out/"), newName("mosquitto-sub-")
	trackSession(id)
	// A persistent session of mosquitto_sub's own, subscribed (-E: exit
	// once subscribed), so that the broker keeps what relay publishes.
	args := append(hostPort(t, base), "-q", "1", "-t", topic, "-c", "-i", id)
	if out, err := exec.Command(subBin, append(args, "-E")...).CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_sub -E: %v: %s", err, out)
	}
	ctx := context.Background()
	plainPayload := []byte("for a device")
	if err := openPub(t, base, "envelope", "never").Publish(ctx, topic, relay.NewMessage(plainPayload)); err != nil {
		t.Fatal(err)
	}
	auto := openPub(t, base)
	derived := []byte(`{"derived":true}`)
	if err := auto.Publish(ctx, topic, &relay.Message{ID: mqtt.DerivedID(derived), Payload: derived}); err != nil {
		t.Fatal(err)
	}
	withMD := &relay.Message{ID: relay.NewID(), Metadata: relay.Metadata{"k": "v"}, Payload: []byte("wrapped")}
	if err := auto.Publish(ctx, topic, withMD); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(subBin, append(args, "-C", "3", "-F", "%x", "-W", "20")...).CombinedOutput()
	if err != nil {
		t.Fatalf("mosquitto_sub: %v: %s", err, out)
	}
	got := strings.Fields(string(out))
	if len(got) != 3 {
		t.Fatalf("mosquitto_sub printed %q, want 3 payloads in hex", out)
	}
	if got[0] != hex.EncodeToString(plainPayload) {
		t.Errorf("envelope=never: mosquitto_sub got %s, want the plain payload %x", got[0], plainPayload)
	}
	if got[1] != hex.EncodeToString(derived) {
		t.Errorf("derived ID, no metadata: mosquitto_sub got %s, want the plain payload %x", got[1], derived)
	}
	if !strings.HasPrefix(got[2], hex.EncodeToString([]byte(mqtt.Magic))) || !strings.HasSuffix(got[2], hex.EncodeToString(withMD.Payload)) {
		t.Errorf("with metadata: mosquitto_sub got %s, want the envelope (%x...) ending in the payload", got[2], mqtt.Magic)
	}
	// envelope=never refuses what it cannot carry.
	if err := openPub(t, base, "envelope", "never").Publish(ctx, topic, withMD); err == nil {
		t.Error("envelope=never published a message with metadata")
	}
}
