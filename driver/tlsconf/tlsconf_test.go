package tlsconf

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver/urlopt"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// certFiles writes a CA certificate and a client certificate and key it
// issued as PEM files.
func certFiles(t *testing.T) (caFile, certFile, keyFile string) {
	t.Helper()
	ca := testenv.NewCA(t)
	dir := t.TempDir()
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.WriteCA(t, caFile)
	testenv.WritePair(t, ca.Client(t, "relay"), certFile, keyFile)
	return caFile, certFile, keyFile
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
	ca, cert, key := certFiles(t)
	tc, err := Files{CAFile: ca, CertFile: cert, KeyFile: key}.Config("default.host")
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
