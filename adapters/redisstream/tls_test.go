package redisstream_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// writeCert issues a certificate for tmpl signed by parent/parentKey (self-
// signed when parent is nil) and writes cert and key as PEM files.
func writeCert(t *testing.T, dir, name string, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(filepath.Join(dir, name+"-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// startTLSRedis runs a private redis-server that only speaks TLS and
// requires client certificates; it is stopped at cleanup.
func startTLSRedis(t *testing.T) (addr, dir string) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skipf("SKIP: redis-server is not installed here, so no TLS server can be started: %v", err)
	}
	dir = t.TempDir()
	now := time.Now()
	ca, caKey := writeCert(t, dir, "ca", &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "relay test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}, nil, nil)
	writeCert(t, dir, "server", &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "redis"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"redis.test"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}, ca, caKey)
	writeCert(t, dir, "client", &x509.Certificate{
		SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "relay"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}, ca, caKey)

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
	ch, _ := subscribe(t, sub, "tls-topic")
	m := relay.NewMessage([]byte("over TLS"))
	publish(t, pub, "tls-topic", m)
	if got := next(t, ch, "over TLS"); got.ID != m.ID {
		t.Errorf("got %s, want %s", got.ID, m.ID)
	}

	noCA := fmt.Sprintf("rediss://%s/0?dial_timeout=2s&tls_cert=%s&tls_key=%s", addr,
		url.QueryEscape(filepath.Join(dir, "client.pem")), url.QueryEscape(filepath.Join(dir, "client-key.pem")))
	if p, err := relay.OpenPublisher(ctx, noCA); err == nil {
		_ = p.Close()
		t.Error("connected without trusting the server's CA")
	}
}
