package redisstream_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// startTLSRedis runs a private redis-server that only speaks TLS and
// requires client certificates; it is stopped at cleanup.
func startTLSRedis(t *testing.T) (addr, dir string) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skipf("SKIP: redis-server is not installed here, so no TLS server can be started: %v", err)
	}
	dir = t.TempDir()
	ca := testenv.NewCA(t)
	ca.WriteCA(t, filepath.Join(dir, "ca.pem"))
	testenv.WritePair(t, ca.Server(t, "127.0.0.1", "redis.test"), filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"))
	testenv.WritePair(t, ca.Client(t, "relay"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem"))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.Command("redis-server", "--port", "0", "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--tls-cert-file", filepath.Join(dir, "server.pem"), "--tls-key-file", filepath.Join(dir, "server-key.pem"),
		"--tls-ca-cert-file", filepath.Join(dir, "ca.pem"), "--tls-auth-clients", "yes",
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			_ = c.Close()
			return addr, dir
		}
		time.Sleep(50 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
	t.Fatalf("TLS redis-server did not start: %s", log)
	return "", ""
}

// rediss:// with a private CA and a client certificate round-trips a
// message; without the CA the certificate is refused.
func TestRedissMutualTLS(t *testing.T) {
	addr, dir := startTLSRedis(t)
	q := url.Values{
		"tls_ca":   {filepath.Join(dir, "ca.pem")},
		"tls_cert": {filepath.Join(dir, "client.pem")},
		"tls_key":  {filepath.Join(dir, "client-key.pem")},
	}
	base := "rediss://" + addr + "/0?" + q.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub, err := relay.OpenPublisher(ctx, base)
	if err != nil {
		t.Fatalf("rediss publisher: %v", err)
	}
	defer pub.Close()
	sub, err := relay.OpenSubscriber(ctx, base+"&group=g&tls_server_name=redis.test")
	if err != nil {
		t.Fatalf("rediss subscriber: %v", err)
	}
	defer sub.Close()
	provision(t, sub, "tls-topic")
	ch, _ := relaytest.Subscribe(t, sub, "tls-topic")
	m := relay.NewMessage([]byte("over TLS"))
	relaytest.Publish(t, pub, "tls-topic", m)
	if got := relaytest.Next(t, ch, "over TLS"); got.ID != m.ID {
		t.Errorf("got %s, want %s", got.ID, m.ID)
	}

	noCA := fmt.Sprintf("rediss://%s/0?dial_timeout=2s&tls_cert=%s&tls_key=%s", addr,
		url.QueryEscape(filepath.Join(dir, "client.pem")), url.QueryEscape(filepath.Join(dir, "client-key.pem")))
	if p, err := relay.OpenPublisher(ctx, noCA); err == nil {
		_ = p.Close()
		t.Error("connected without trusting the server's CA")
	}
}
