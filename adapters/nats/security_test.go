package nats_test

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// roundTrip publishes one message through rawURL and receives it with a
// subscriber opened on the same URL.
func roundTrip(t *testing.T, rawURL string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub, err := relay.OpenPublisher(ctx, rawURL)
	if err != nil {
		t.Fatalf("OpenPublisher: %v", err)
	}
	defer pub.Close()
	sub, err := relay.OpenSubscriber(ctx, testenv.WithParams(rawURL, "group", "g"))
	if err != nil {
		t.Fatalf("OpenSubscriber: %v", err)
	}
	defer sub.Close()
	topic := newName("sec.")
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	m := relay.NewMessage([]byte("secured"))
	if err := pub.Publish(ctx, topic, m); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, ch, 1)[0]; got.ID != m.ID {
		t.Fatalf("got %q, want %q", got.ID, m.ID)
	}
}

// openFails checks that opening a publisher on rawURL fails with an
// error that does not show secret.
func openFails(t *testing.T, rawURL, secret string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pub, err := relay.OpenPublisher(ctx, rawURL)
	if err == nil {
		_ = pub.Close()
		t.Fatalf("OpenPublisher(%s) succeeded", relay.Redact(rawURL))
	}
	if secret != "" && strings.Contains(err.Error(), secret) {
		t.Errorf("error %q shows the secret", err)
	}
	t.Logf("refused as expected: %v", err)
}

func TestUserPassword(t *testing.T) {
	srv := startPrivateServer(t, "--user", "alice", "--pass", "s3cr3t")
	u, _ := url.Parse(srv.url())
	u.User = url.UserPassword("alice", "s3cr3t")
	roundTrip(t, u.String())
	u.User = url.UserPassword("alice", "wr0ng-pw")
	openFails(t, u.String(), "wr0ng-pw")
}

func TestToken(t *testing.T) {
	srv := startPrivateServer(t, "--auth", "t0k3n-abc")
	roundTrip(t, srv.url()+"?token=t0k3n-abc")
	openFails(t, srv.url()+"?token=n0t-the-t0k3n", "n0t-the-t0k3n")
}

// TLS with the server's CA given by tls_ca; without it the system roots do
// not trust the server and connecting fails.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testenv.NewCA(t)
	caFile := ca.WriteCA(t, filepath.Join(dir, "ca.pem"))
	cert, key := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	testenv.WritePair(t, ca.Server(t, "127.0.0.1"), cert, key)
	srv := startPrivateServer(t, "--tls", "--tlscert", cert, "--tlskey", key)
	roundTrip(t, fmt.Sprintf("%s?tls_ca=%s", srv.url(), url.QueryEscape(caFile)))
	openFails(t, srv.url()+"?tls=true", "")
}
