package amqp_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/adapters/amqp"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// tlsProxy terminates TLS in front of the test broker, so that amqps:// and
// the tls_* options are exercised without a TLS listener on RabbitMQ. It
// returns the proxy's address and the CA file that signed its certificate.
func tlsProxy(t *testing.T, backend string) (addr, caFile string) {
	t.Helper()
	ca := testenv.NewCA(t)
	caFile = ca.WriteCA(t, filepath.Join(t.TempDir(), "ca.pem"))
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{ca.Server(t, "broker.test")},
		MinVersion:   tls.VersionTLS12,
	})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Serve(t, ln, func(c net.Conn) {
		b, err := net.Dial("tcp", backend)
		if err != nil {
			return
		}
		done := make(chan struct{})
		go func() { _, _ = io.Copy(b, c); _ = b.Close(); close(done) }()
		_, _ = io.Copy(c, b)
		_ = c.Close()
		<-done
	})
	return ln.Addr().String(), caFile
}

func TestAMQPS(t *testing.T) {
	base, err := url.Parse(brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	port := base.Port()
	if port == "" {
		port = "5672"
	}
	addr, ca := tlsProxy(t, net.JoinHostPort(base.Hostname(), port))
	u := *base
	u.Scheme = "amqps"
	u.Host = addr
	tlsURL := u.String()

	c := newCleaner(t)
	topic, group := unique("tls"), unique("g")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pub, err := relay.OpenPublisher(ctx, testenv.WithParams(tlsURL, "tls_ca", ca, "tls_server_name", "broker.test"))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	s, err := relay.OpenSubscriber(ctx, testenv.WithParams(tlsURL, "group", group, "tls_ca", ca, "tls_server_name", "broker.test"))
	if err != nil {
		t.Fatal(err)
	}
	sub := &trackedSub{Subscriber: s.(*amqp.Subscriber), c: c, group: group}
	defer sub.Close()
	relaytest.Provision(t, sub, topic)
	ch, _ := relaytest.Subscribe(t, sub, topic)
	m := relay.NewMessage([]byte("over TLS"))
	relaytest.Publish(t, pub, topic, m)
	if got := relaytest.Next(t, ch, "over TLS"); got.ID != m.ID {
		t.Errorf("got %s, want %s", got.ID, m.ID)
	} else {
		_ = got.Ack()
	}

	// Without the CA the handshake fails, within the ctx, saying why.
	_, err = relay.OpenPublisher(ctx, testenv.WithParams(tlsURL, "tls_server_name", "broker.test"))
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("amqps without the CA = %v, want a certificate error", err)
	}
	// TLS options on amqp:// are a configuration error.
	if _, err := relay.OpenPublisher(ctx, testenv.WithParams(brokerURL(t), "tls_ca", ca)); err == nil {
		t.Errorf("tls_ca on amqp:// accepted")
	}
}
