//go:build faults

package faults

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/bridge"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// Secrets planted in URLs; none may appear in logs, errors, metrics,
// health output or `relay validate` output.
const (
	secretPW  = "Pw-8c1d9e-secret"
	secretKey = "Key-77f0aa-secret"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func assertNoSecret(t *testing.T, what, text string) {
	t.Helper()
	for _, s := range []string{secretPW, secretKey} {
		if strings.Contains(text, s) {
			t.Errorf("%s contains a secret (%s):\n%.3000s", what, s, text)
		}
	}
}

// A bridge forwarding from SQS (goaws, static credentials with a secret
// key in the URL) to the memory backend, with a route (its
// metric label is the route name), debug logging, and a second bridge whose
// Redis and RabbitMQ URLs carry passwords the brokers reject: the logs,
// Run's error, /metrics and /readyz never show a secret.
func TestSecretsBridge(t *testing.T) {
	svc := testenv.StartSQS()
	defer svc.Stop()
	svc.Need(t)
	q := url.Values{}
	q.Set("region", svc.Region)
	if svc.Endpoint != "" {
		q.Set("endpoint", svc.Endpoint)
	}
	q.Set("access_key_id", "test")
	q.Set("secret_key", secretKey)
	sqsURL := "sqs://?" + q.Encode()
	queue, dest := unique("sec"), "mem://"+unique("sec")

	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b, err := bridge.New(bridge.Config{Routes: []bridge.Route{{
		Name: "sqs-to-mem",
		From: bridge.Source{URL: sqsURL, Topic: queue},
		To:   bridge.Destination{URL: dest, Topic: "out"},
	}}}, bridge.Options{Logger: log})
	if err != nil {
		assertNoSecret(t, "bridge.New error", err.Error())
		t.Fatal(err)
	}
	out := openSub(t, dest+"?group=check")
	provision(t, out, "out")
	ctx, cancel := context.WithCancel(context.Background())
	och, err := out.Subscribe(ctx, "out")
	if err != nil {
		t.Fatal(err)
	}
	runErr := make(chan error, 1)
	go func() { runErr <- b.Run(ctx) }()
	pub := openPub(t, sqsURL)
	msgs := batchOf(5, 16, "sec")
	pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
	if err := pub.Publish(pctx, queue, msgs...); err != nil {
		assertNoSecret(t, "Publish error", err.Error())
		t.Fatal(err)
	}
	pcancel()
	for range msgs {
		select {
		case m := <-och:
			_ = m.Ack()
		case <-time.After(60 * time.Second):
			t.Fatal("the bridge forwarded nothing within 60s")
		}
	}
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	for _, path := range []string{"/metrics", "/readyz", "/healthz"} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assertNoSecret(t, path, string(body))
		if path == "/metrics" && !strings.Contains(string(body), "route=") {
			t.Errorf("/metrics has no route label; the check saw nothing:\n%.1000s", body)
		}
	}
	cancel()
	if err := <-runErr; err != nil {
		assertNoSecret(t, "Run error", err.Error())
	}
	assertNoSecret(t, "bridge logs", logs.String())

	// Rejected credentials: the errors and logs about them.
	logs2 := &syncBuffer{}
	log2 := slog.New(slog.NewJSONHandler(logs2, &slog.HandlerOptions{Level: slog.LevelDebug}))
	redisBad := "redis://user:" + secretPW + "@127.0.0.1:6379/0?group=g"
	amqpBad := "amqp://guest:" + secretPW + "@127.0.0.1:5672/"
	b2, err := bridge.New(bridge.Config{Routes: []bridge.Route{
		{Name: "redis", From: bridge.Source{URL: redisBad, Topic: "t"}, To: bridge.Destination{URL: dest}},
		{Name: "amqp", From: bridge.Source{URL: amqpBad, Topic: "t", Group: "g"}, To: bridge.Destination{URL: dest}},
	}}, bridge.Options{Logger: log2})
	if err != nil {
		assertNoSecret(t, "bridge.New error (bad credentials)", err.Error())
	} else {
		ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
		srv2 := httptest.NewServer(b2.Handler())
		go func() {
			time.Sleep(2 * time.Second)
			if resp, err := srv2.Client().Get(srv2.URL + "/readyz"); err == nil {
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				assertNoSecret(t, "/readyz (bad credentials)", string(body))
			}
		}()
		if err := b2.Run(ctx2); err != nil {
			assertNoSecret(t, "Run error (bad credentials)", err.Error())
		}
		cancel2()
		srv2.Close()
	}
	assertNoSecret(t, "bridge logs (bad credentials)", logs2.String())
	if !strings.Contains(logs2.String(), "xxxxx") {
		t.Errorf("the bad-credentials bridge logged no redacted URL: the check saw nothing:\n%.2000s", logs2.String())
	}
	for _, raw := range []string{redisBad, amqpBad} {
		octx, ocancel := context.WithTimeout(context.Background(), 5*time.Second)
		if s, err := relay.OpenSubscriber(octx, raw); err != nil {
			assertNoSecret(t, "OpenSubscriber error", err.Error())
		} else {
			_ = s.Close()
		}
		ocancel()
	}
}

// `relay validate` on a valid and an invalid config whose URLs hold
// passwords and secret parameters, literally and through ${ENV}.
func TestSecretsValidate(t *testing.T) {
	dir := t.TempDir()
	bin := relayBinary(t)
	configs := map[string]string{
		"valid.yaml": `
routes:
  - name: r1
    from: {url: "amqp://guest:${PW}@127.0.0.1:5672/", topic: a, group: g}
    to: {url: "redis://u:` + secretPW + `@127.0.0.1:6379/0", topic: b}
  - name: r2
    from: {url: "sqs://?region=us-east-1&access_key_id=a&secret_key=${KEY}", topic: q}
    to: {url: "kafka://127.0.0.1:9092?sasl_mechanism=plain&sasl_user=u&sasl_password=` + secretKey + `", topic: b}
`,
		"invalid.yaml": `
routes:
  - from: {url: "amqp://guest:${PW}@127.0.0.1:5672/?bogus=1", topic: a}
    to: {url: "redis://u:` + secretPW + `@127.0.0.1:6379/0?pool_size=x", topic: b}
  - from: {url: "sqs://?region=us-east-1&secret_key=${KEY}&group=g", topic: q}
    to: {url: "kafka://127.0.0.1:9092?sasl_password=` + secretKey + `&sasl_mechanism=nope", topic: b, colour: red}
  - from: {url: "nosuch://u:` + secretPW + `@h/", topic: x, group: g}
    to: {url: "mem://y#` + secretKey + `"}
http: {address: "no-port"}
`,
	}
	for name, body := range configs {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "validate", "-c", path)
		cmd.Env = append(os.Environ(), "PW="+secretPW, "KEY="+secretKey)
		out, err := cmd.CombinedOutput()
		t.Logf("relay validate %s: %v\n%s", name, err, out)
		if (err == nil) != (name == "valid.yaml") {
			t.Errorf("relay validate %s: exit %v, want %s", name, err, map[bool]string{true: "0", false: "non-zero"}[name == "valid.yaml"])
		}
		assertNoSecret(t, "relay validate "+name, string(out))
	}
}

// The bridge's operations endpoint listens on loopback unless the config
// says otherwise.
func TestBridgeHTTPLoopbackByDefault(t *testing.T) {
	c, err := bridge.Parse([]byte("routes:\n  - name: r\n    from: {url: 'mem://a', topic: t, group: g}\n    to: {url: 'mem://b'}\n"), "b.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	for what, addr := range map[string]string{
		"bridge.DefaultHTTPAddress":        bridge.DefaultHTTPAddress,
		"a parsed config without http":     c.WithDefaults().HTTP.Address,
		"a Go config without HTTP.Address": bridge.Config{}.WithDefaults().HTTP.Address,
	} {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			t.Errorf("%s: %q: %v", what, addr, err)
			continue
		}
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			t.Errorf("%s = %q: not a loopback address", what, addr)
		}
	}
}
