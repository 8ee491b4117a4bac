package kafka_test

import (
	"context"
	"crypto/tls"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// TestTLS and TestSASL always start a kfake cluster of their own, set up
// for the purpose, whatever RELAY_TEST_KAFKA_BROKERS says.

// roundTrip publishes one message and receives it with the two URLs.
func roundTrip(t *testing.T, pubURL, subURL string) {
	t.Helper()
	topic := unique("sec")
	pub := relaytest.OpenPublisher(t, pubURL)
	m := publishN(t, pub, topic, 1, nil)[0]
	sub := relaytest.OpenSubscriber(t, subURL)
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	if got := recv(t, ch); got.ID != m.ID {
		t.Fatalf("got %s", got.ID)
	}
}

func TestTLS(t *testing.T) {
	testCA := testenv.NewCA(t)
	cert := testCA.Server(t, "127.0.0.1", "kafka.test")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ca := testCA.WriteCA(t, filepath.Join(t.TempDir(), "ca.pem"))
	addr := c.ListenAddrs()[0]
	base := "kafka://" + addr + "?tls_ca=" + url.QueryEscape(ca)
	roundTrip(t, base, base+"&group="+unique("g"))

	// Without the CA the certificate is refused and opening fails.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if p, err := relay.OpenPublisher(ctx, "kafka://"+addr+"?tls=true"); err == nil {
		_ = p.Close()
		t.Fatal("untrusted certificate accepted")
	}
}

func TestSASL(t *testing.T) {
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser(mech, "relay", "s3cret"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			addr := c.ListenAddrs()[0]
			m := strings.ToLower(mech)
			base := "kafka://" + addr + "?sasl_mechanism=" + m + "&sasl_user=relay&sasl_password=s3cret"
			roundTrip(t, base, "kafka://relay:s3cret@"+addr+"?sasl_mechanism="+m+"&group="+unique("g"))

			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			p, err := relay.OpenPublisher(ctx, "kafka://"+addr+"?sasl_mechanism="+m+"&sasl_user=relay&sasl_password=wrong")
			if err == nil {
				_ = p.Close()
				t.Fatal("wrong password accepted")
			}
			if strings.Contains(err.Error(), "wrong") {
				t.Fatalf("password in error: %v", err)
			}
		})
	}
}
