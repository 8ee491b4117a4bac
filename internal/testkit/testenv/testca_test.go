package testenv

import (
	"crypto/tls"
	"crypto/x509"
	"path/filepath"
	"testing"
)

func TestCAIssuesVerifiableCertificates(t *testing.T) {
	ca := NewCA(t)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca.PEM) {
		t.Fatal("CA PEM not parsable")
	}
	srv := ca.Server(t, "broker.test", "127.0.0.1")
	leaf, err := x509.ParseCertificate(srv.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"broker.test", "127.0.0.1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: host}); err != nil {
			t.Errorf("server certificate for %s: %v", host, err)
		}
	}
	cli := ca.Client(t, "relay")
	cleaf, _ := x509.ParseCertificate(cli.Certificate[0])
	if _, err := cleaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if leaf.SerialNumber.Cmp(cleaf.SerialNumber) == 0 {
		t.Error("two certificates share a serial number")
	}

	dir := t.TempDir()
	ca.WriteCA(t, filepath.Join(dir, "ca.pem"))
	WritePair(t, cli, filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem"))
	if _, err := tls.LoadX509KeyPair(filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")); err != nil {
		t.Errorf("written pair: %v", err)
	}
}
