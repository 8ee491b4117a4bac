package mqtt_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// mqtts:// against a mosquitto whose only listener is TLS, with a
// certificate from a throwaway CA: a round trip with tls_ca= works; with
// the system roots (which do not trust that CA) opening fails.
func TestTLS(t *testing.T) {
	dir, err := os.MkdirTemp("", "relay-mqtt-tls-") // readable by mosquitto's user
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	ca := testenv.NewCA(t)
	caFile := ca.WriteCA(t, filepath.Join(dir, "ca.pem"))
	cert, key := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	testenv.WritePair(t, ca.Server(t, "127.0.0.1"), cert, key)
	for _, f := range []string{dir, caFile, cert, key} {
		if err := os.Chmod(f, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b := testenv.StartMosquitto(t, "cafile "+caFile, "certfile "+cert, "keyfile "+key)
	base := "mqtts://" + strings.TrimPrefix(b.URL(), "mqtt://")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if p, err := relay.OpenPublisher(ctx, base); err == nil {
		_ = p.Close()
		t.Fatal("opened a TLS connection to a server whose CA is not trusted")
	}
	trusted := base + "?tls_ca=" + caFile
	sub := openSub(t, trusted, newName("g"))
	topic := newName("tls/")
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	m := relay.NewMessage([]byte("over TLS"))
	if err := openPub(t, trusted).Publish(context.Background(), topic, m); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, ch, 1)[0]; got.ID != m.ID || string(got.Payload) != "over TLS" {
		t.Fatalf("got %s %q", got.ID, got.Payload)
	}
}
