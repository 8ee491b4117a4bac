package sqs

import (
	"context"
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
)

func mustParse(t *testing.T, raw string, subscriber bool) (Config, error) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return parseURL(u, subscriber)
}

func TestURLParams(t *testing.T) {
	c, err := mustParse(t, "sqs://?region=eu-west-1&endpoint=http://localhost:4566&wait=0&receive_timeout=30s&visibility=2m&extend_every=0&ack_linger=0&max_messages=5&pollers=2&inflight=7&max_receive=3&dlq=dead&retention=3600&fifo=true&fifo_high_throughput=true&max_bytes=1048576&send_concurrency=3&create_queues=false&unwrap_sns=false&access_key_id=AK&secret_key=SK&session_token=ST&max_attempts=5&profile=p&ca_bundle=/x.pem&sqs_endpoint=http://a&sns_endpoint=http://b", true)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Region: "eu-west-1", Endpoint: "http://localhost:4566", SQSEndpoint: "http://a", SNSEndpoint: "http://b", Profile: "p",
		AccessKeyID: "AK", SecretAccessKey: "SK", SessionToken: "ST", CABundle: "/x.pem", MaxAttempts: 5,
		NoCreateQueues: true, NoUnwrapSNS: true, Wait: -1, ReceiveTimeout: 30 * time.Second, MaxMessages: 5, Pollers: 2, InFlight: 7, Visibility: 2 * time.Minute,
		ExtendEvery: -1, AckLinger: -1, MaxReceive: 3, DLQ: "dead", Retention: time.Hour, FIFO: true, FIFOHighThroughput: true,
		MaxBytes: 1 << 20, SendConcurrency: 3}
	if c != want {
		t.Errorf("parsed\n %+v\nwant\n %+v", c, want)
	}
	s, err := mustParse(t, "sns://?region=us-east-1&group=billing&create_topics=false&account=123456789012&queue_policy=false&raw_delivery=false", true)
	if err != nil || s.Group != "billing" || !s.NoCreateTopics || s.Account != "123456789012" || !s.NoQueuePolicy || !s.NoRawDelivery {
		t.Errorf("sns params: %+v %v", s, err)
	}
}

func TestURLErrors(t *testing.T) {
	cases := map[string]struct {
		url        string
		subscriber bool
		want       string
	}{
		"group on sqs":       {"sqs://?region=r&group=g", true, "use sns://"},
		"unknown param":      {"sqs://?region=r&bogus=1", false, "bogus"},
		"sns sub no group":   {"sns://?region=r", true, "required"},
		"group on sqs pub":   {"sqs://?region=r&group=g", false, "use sns://"},
		"sns pub bad group":  {"sns://?region=r&group=a.b", false, "A-Z"},
		"sub value on pub":   {"sqs://?region=r&max_messages=11", false, "1..10"},
		"bad group":          {"sns://?region=r&group=a.b", true, "A-Z"},
		"wait too long":      {"sqs://?wait=30", true, "20s"},
		"receive too short":  {"sqs://?wait=10&receive_timeout=5", true, "receive_timeout"},
		"max messages":       {"sqs://?max_messages=11", true, "1..10"},
		"sns max bytes":      {"sns://?max_bytes=1048576", false, "1024..262144"},
		"dlq without count":  {"sqs://?dlq=x", true, "max_receive"},
		"bad duration":       {"sqs://?visibility=soon", true, "visibility"},
		"host":               {"sqs://localhost:4566", false, "endpoint="},
		"extend too late":    {"sqs://?visibility=10&extend_every=10", true, "shorter"},
		"raw delivery sqs":   {"sqs://?raw_delivery=false", true, "raw_delivery"},
		"only access key id": {"sqs://?access_key_id=a", false, "both"},
		"bad account":        {"sns://?account=12", false, "12-digit"},
		"account on sqs":     {"sqs://?account=123456789012", false, "account"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := mustParse(t, c.url, c.subscriber)
			if err == nil || !errors.Is(err, relay.ErrBadURL) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: error %v, want a bad-URL error mentioning %q", c.url, err, c.want)
			}
		})
	}
}

func TestSecretsRedacted(t *testing.T) {
	_, err := mustParse(t, "sqs://?secret_key=TOPSECRET&session_token=TOKEN123&bogus=1", false)
	if err == nil || strings.Contains(err.Error(), "TOPSECRET") || strings.Contains(err.Error(), "TOKEN123") {
		t.Errorf("error leaks a secret: %v", err)
	}
}

// The machine exports AWS_CA_BUNDLE: the default configuration must load
// with it, a broken one must say what to do, and ca_bundle= overrides it.
func TestDefaultConfigWithCABundle(t *testing.T) {
	ctx := context.Background()
	cfg := Config{Region: "us-east-1", AccessKeyID: "a", SecretAccessKey: "b"}
	if env := os.Getenv("AWS_CA_BUNDLE"); env != "" {
		t.Logf("AWS_CA_BUNDLE=%s", env)
	}
	p, err := NewSQSPublisher(ctx, cfg)
	if err != nil {
		t.Fatalf("default configuration with this environment's AWS_CA_BUNDLE: %v", err)
	}
	_ = p.Close()

	t.Setenv("AWS_CA_BUNDLE", filepath.Join(t.TempDir(), "missing.pem"))
	_, err = NewSQSPublisher(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "AWS_CA_BUNDLE") || !strings.Contains(err.Error(), "ca_bundle=") {
		t.Errorf("broken AWS_CA_BUNDLE: error %v, want one naming AWS_CA_BUNDLE and ca_bundle=", err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, testCA(t), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.CABundle = caFile
	p, err = NewSQSPublisher(ctx, cfg)
	if err != nil {
		t.Fatalf("ca_bundle= overriding a broken AWS_CA_BUNDLE: %v", err)
	}
	_ = p.Close()

	t.Setenv("AWS_CA_BUNDLE", "")
	if _, err := NewSQSPublisher(ctx, Config{AccessKeyID: "a", SecretAccessKey: "b"}); err != nil && !strings.Contains(err.Error(), "region") {
		t.Errorf("no region: %v, want an error asking for region=", err)
	}
}

// testCA returns a throwaway self-signed CA certificate in PEM (a valid
// bundle for the CA test; it signs nothing).
func testCA(t *testing.T) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "relay test CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
