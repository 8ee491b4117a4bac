package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/urlopt"
)

// certFiles writes a self-signed certificate and its key as PEM files.
func certFiles(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tlsconf.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestReadEveryParam(t *testing.T) {
	u, _ := url.Parse("x://h?tls_ca=/ca&tls_cert=/c&tls_key=/k&tls_server_name=n&tls_insecure=true")
	p := urlopt.New(u)
	got := Read(p)
	want := Files{CAFile: "/ca", CertFile: "/c", KeyFile: "/k", ServerName: "n", Insecure: true}
	if got != want || !got.Set() {
		t.Fatalf("Read = %+v, want %+v", got, want)
	}
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	if (Files{}).Set() {
		t.Error("zero Files reports Set")
	}
	if len(Params) != 5 {
		t.Errorf("Params = %v", Params)
	}
}

func TestBuild(t *testing.T) {
	cert, key := certFiles(t)
	tc, err := Files{CAFile: cert, CertFile: cert, KeyFile: key}.Config("default.host")
	if err != nil {
		t.Fatal(err)
	}
	if tc.RootCAs == nil || len(tc.Certificates) != 1 || tc.ServerName != "default.host" || tc.InsecureSkipVerify {
		t.Errorf("config = %+v", tc)
	}
	tc, err = Files{ServerName: "other", Insecure: true}.Config("default.host")
	if err != nil {
		t.Fatal(err)
	}
	if tc.RootCAs != nil || tc.ServerName != "other" || !tc.InsecureSkipVerify {
		t.Errorf("config = %+v", tc)
	}
}

// Every problem is reported at once through urlopt, naming its parameter.
func TestProblemsReportedThroughURLOpt(t *testing.T) {
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("x://h?tls_ca=" + url.QueryEscape(notPEM) + "&tls_cert=/c.pem")
	p := urlopt.New(u)
	Read(p).Build("", p.Fail)
	err := p.Err()
	if !errors.Is(err, relay.ErrBadURL) {
		t.Fatalf("err = %v, want ErrBadURL", err)
	}
	for _, want := range []string{`"tls_ca"`, "no PEM certificate", `"tls_cert"`, "together"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %s", err, want)
		}
	}

	_, err = Files{CAFile: "/no/such/ca.pem", CertFile: "/no/such/c.pem", KeyFile: "/no/such/k.pem"}.Config("")
	if err == nil || !strings.Contains(err.Error(), "tls_ca: ") || !strings.Contains(err.Error(), "tls_cert: ") {
		t.Errorf("Config with missing files = %v", err)
	}
}
