package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// TestMemRefusedOutsideBench: mem:// lives inside one process, so the
// commands that are one process of several refuse it with exit 2 and point
// to relay bench, which publishes and consumes in one process and works.
func TestMemRefusedOutsideBench(t *testing.T) {
	redis := "redis://127.0.0.1:6379/0"
	for _, args := range [][]string{
		{"publish", "mem://x", "orders", "--data", "hello"},
		{"consume", "mem://x", "orders", "--group", "g", "--count", "1", "--timeout", "3s"},
		{"replay", "mem://x", "orders.poison", "--group", "g"},
		{"replay", redis, "orders.poison", "--group", "g", "--to", "MEM://x"},
	} {
		code, stdout, stderr := runRelay(t, nil, args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, "is in-process only") ||
			!strings.Contains(stderr, `"relay bench mem://x TOPIC"`) {
			t.Errorf("relay %v: exit %d, want 2\nstdout %q\nstderr %s", args, code, stdout, stderr)
		}
	}
	code, stdout, stderr := runRelay(t, nil, "bench", "mem://x", "orders", "-n", "200", "-size", "10")
	if code != 0 || !strings.Contains(stdout, "consume:     200 in ") {
		t.Errorf("relay bench mem://x: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
}

// TestDocumentedExitCodes runs the built binary once for every exit code
// that docs/bridge.md documents, with the causes it names.
func TestDocumentedExitCodes(t *testing.T) {
	holdBrokers(t)
	r := redisBackend(t)
	topic := "e2e-codes-" + id()
	okCfg := writeFile(t, "ok.yaml", fmt.Sprintf("routes:\n- {name: r, from: {url: %q, topic: a, group: g}, to: {url: 'amqp://guest:guest@127.0.0.1:1/?connect_timeout=1s'}}\n", r.pubURL))
	badCfg := writeFile(t, "bad.yaml", "routes:\n- {name: r, from: {url: 'redis://127.0.0.1:6379/0', topic: a}, to: {url: 'redis://127.0.0.1:6379/0'}, bogus: 1}\n")
	for _, c := range []struct {
		why  string
		code int
		args []string
		// in must be in stderr; notIn must not.
		in, notIn string
	}{
		{"published", 0, []string{"publish", r.pubURL, topic, "--data", "x"}, "published 1 message(s)", ""},
		{"cannot connect", 1, []string{"publish", "redis://127.0.0.1:1/0", topic, "--data", "x", "--timeout", "5s"}, "connection refused", ""},
		{"timeout", 1, []string{"consume", r.pubURL, topic + "-empty", "--group", "g", "--count", "1", "--timeout", "1s"}, "timeout after 0 of 1", ""},
		{"unknown URL parameter", 2, []string{"publish", r.pubURL + "?bogus=1", topic, "--data", "x"}, `"bogus"`, ""},
		{"unknown URL scheme", 2, []string{"consume", "pulsar://127.0.0.1:6650", topic, "--group", "g"}, `"pulsar"`, ""},
		{"URL without scheme", 2, []string{"publish", "127.0.0.1:6379", topic, "--data", "x"}, "bad URL", ""},
		{"missing --group", 2, []string{"consume", r.pubURL, topic, "--count", "1"}, "--group is required", ""},
		{"missing --group on replay", 2, []string{"replay", r.pubURL, topic + ".poison"}, "--group is required", ""},
		{"empty topic", 2, []string{"publish", r.pubURL, "", "--data", "x"}, "the topic is empty", ""},
		{"empty topic on consume", 2, []string{"consume", r.pubURL, " ", "--group", "g"}, "the topic is empty", ""},
		{"bad flag value", 2, []string{"publish", r.pubURL, topic, "--count", "many"}, `invalid value "many" for flag -count`, ""},
		{"unknown flag", 2, []string{"consume", r.pubURL, topic, "--grop", "g"}, "flag provided but not defined: -grop", ""},
		{"bad bridge flag value", 2, []string{"bridge", "-c", okCfg, "--log-level", "loud", "--http", "nowhere"}, `--log-level "loud"`, okCfg},
		{"bad bridge flag value on a dry run", 2, []string{"bridge", "-c", okCfg, "--dry-run", "--log-format", "xml"}, `--log-format "xml": want text or json`, okCfg},
		{"invalid config (validate)", 3, []string{"validate", "-c", badCfg}, badCfg + ":2:", ""},
		{"invalid config (bridge)", 3, []string{"bridge", "-c", badCfg}, badCfg + ":2:", ""},
		{"unreachable endpoint", 4, []string{"bridge", "-c", okCfg, "--dry-run", "--timeout", "5s"}, "1 of 2 endpoint(s) unreachable", ""},
	} {
		code, _, stderr := runRelay(t, nil, c.args...)
		if code != c.code || !strings.Contains(stderr, c.in) || (c.notIn != "" && strings.Contains(stderr, c.notIn)) {
			t.Errorf("%s: relay %q: exit %d, want %d with %q in stderr (and not %q):\n%s", c.why, c.args, code, c.code, c.in, c.notIn, stderr)
		}
	}
}

// TestCLISizeLimitSaysWhatWasMeasured: a message over a size limit is
// refused with an error that says what was counted.
func TestCLISizeLimitSaysWhatWasMeasured(t *testing.T) {
	holdBrokers(t)
	r := redisBackend(t)
	topic := "e2e-size-" + id()
	payload := strings.Repeat("p", 20)
	code, _, stderr := runRelay(t, nil, "publish", testenv.WithParams(r.pubURL, "max_bytes", "10"), topic, "--data", payload, "--id", "m-1")
	if code != 1 || !strings.Contains(stderr, "relay: message m-1: payload is 20 bytes; limit 10") {
		t.Errorf("payload over the limit: exit %d, stderr:\n%s", code, stderr)
	}
	code, _, stderr = runRelay(t, nil, "publish", testenv.WithParams(r.pubURL, "max_bytes", "40"), topic, "--data", payload, "--id", "m-2", "--key", "customer-1", "--header", "type=order-placed")
	if code != 1 || !regexpMatch(`relay: message m-2: message is \d+ bytes encoded: payload 20, plus ID, key and metadata; limit 40`, stderr) {
		t.Errorf("message over the limit: exit %d, stderr:\n%s", code, stderr)
	}
}

// TestCLIProvision: relay provision creates topic and group on every
// backend that has Provision, so that a message published before the
// group's first consumer starts is kept for it; usage errors exit 2, an
// unreachable broker 1.
func TestCLIProvision(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			run := id()
			topic, group := "e2e-prov-"+run, "g-"+run
			args := []string{"provision", b.pubURL, topic, "--group", group}
			want := "provisioned topic " + topic + " for group " + group + " on "
			if b.queueIsGroup {
				args = []string{"provision", b.subURL(""), topic}
				want = "provisioned " + topic + " on "
			}
			code, stdout, stderr := runRelay(t, nil, args...)
			if code != 0 || !strings.HasPrefix(stdout, want) {
				t.Fatalf("relay %q: exit %d\nstdout %q\nstderr %s", args, code, stdout, stderr)
			}
			// Idempotent.
			if code, _, stderr := runRelay(t, nil, args...); code != 0 {
				t.Fatalf("second provision: exit %d: %s", code, stderr)
			}
			m := relay.NewMessage([]byte("kept for " + group))
			publish(t, b, topic, m)
			code, stdout, stderr = runRelay(t, nil, "consume", b.subURL(group), topic, "--count", "1", "--format", "json", "--timeout", "60s")
			if code != 0 || !strings.Contains(stdout, `"id":"`+m.ID+`"`) {
				t.Errorf("consume after provision: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
			}
		})
	}
	for _, c := range []struct {
		code int
		args []string
		in   string
	}{
		{2, []string{"provision", "redis://127.0.0.1:6379/0", "t"}, "--group is required"},
		{2, []string{"provision", "mem://x", "t", "--group", "g"}, "in-process only"},
		{2, []string{"provision", "redis://127.0.0.1:6379/0"}, "missing arguments"},
		{2, []string{"provision", "redis://127.0.0.1:6379/0", "", "--group", "g"}, "the topic is empty"},
		{2, []string{"provision", "redis://127.0.0.1:6379/0?bogus=1", "t", "--group", "g"}, `"bogus"`},
		{1, []string{"provision", "redis://127.0.0.1:1/0", "t", "--group", "g", "--timeout", "5s"}, "connection refused"},
	} {
		if code, _, stderr := runRelay(t, nil, c.args...); code != c.code || !strings.Contains(stderr, c.in) {
			t.Errorf("relay %q: exit %d, want %d with %q:\n%s", c.args, code, c.code, c.in, stderr)
		}
	}
}

// TestLibrariesDoNotWriteToStderr: the client libraries' own messages go
// through relay's logger (slog) or nowhere, never straight to stderr: every
// line relay prints on a failed connect is relay's, on every backend.
func TestLibrariesDoNotWriteToStderr(t *testing.T) {
	noAWS, imdsHits := noAWSEnv(t)
	for _, u := range []string{
		"redis://127.0.0.1:1/0",
		"amqp://guest:guest@127.0.0.1:1/?connect_timeout=1s",
		"kafka://127.0.0.1:1",
		"sqs://?region=us-east-1&endpoint=http://127.0.0.1:1",
	} {
		code, _, stderr := runRelayEnv(t, noAWS, nil, "publish", u, "t", "--data", "x", "--timeout", "5s")
		if code != 1 {
			t.Errorf("publish to %s: exit %d, want 1:\n%s", u, code, stderr)
		}
		for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
			if !strings.HasPrefix(line, "relay publish: ") && !strings.HasPrefix(line, "time=") {
				t.Errorf("publish to %s: a line on stderr that is not relay's: %q", u, line)
			}
		}
	}
	if imdsHits.Load() == 0 {
		t.Error("the AWS SDK never asked the metadata stand-in: the SDK warning was not exercised")
	}
}

// noAWSEnv returns environment variables under which the AWS credential
// chain finds no credentials (no variables, no profile files), and ends at
// a stand-in for the EC2 instance metadata service on loopback: it
// refuses the IMDSv2 token, which makes the SDK warn "falling back to
// IMDSv1", and has no role. hits counts the requests it got.
func noAWSEnv(t *testing.T) (env []string, hits *atomic.Int32) {
	hits = new(atomic.Int32)
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Method == http.MethodPut {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		w.WriteHeader(http.StatusNotFound)
	}))
	t.Cleanup(imds.Close)
	return []string{"AWS_EC2_METADATA_SERVICE_ENDPOINT=" + imds.URL, "AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "AWS_SESSION_TOKEN=",
		"AWS_PROFILE=", "AWS_CONFIG_FILE=" + filepath.Join(t.TempDir(), "none"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(t.TempDir(), "none"),
		"AWS_EC2_METADATA_DISABLED=", "AWS_CONTAINER_CREDENTIALS_FULL_URI=", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI=", "AWS_WEB_IDENTITY_TOKEN_FILE="}, hits
}

// TestAWSCredentialsHint: with no AWS credentials anywhere, the credential
// chain ends at the instance metadata service; relay's error then says
// what to set, on sqs:// and sns:// alike.
func TestAWSCredentialsHint(t *testing.T) {
	noAWS, _ := noAWSEnv(t)
	for _, u := range []string{"sqs://?region=us-east-1&endpoint=http://127.0.0.1:1", "sns://?region=us-east-1&endpoint=http://127.0.0.1:1"} {
		code, _, stderr := runRelayEnv(t, noAWS, nil, "publish", u, "t", "--data", "x", "--timeout", "5s")
		if want := "relay/sqs: no usable AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (any value for an emulator such as goaws), or AWS_PROFILE"; code != 1 || !strings.Contains(stderr, want) {
			t.Errorf("publish to %s without credentials: exit %d, want 1 and %q:\n%s", u, code, want, stderr)
		}
	}
}
