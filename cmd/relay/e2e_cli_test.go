package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

func TestCLIHelpAndUsageErrors(t *testing.T) {
	for _, c := range commands {
		code, stdout, _ := runRelay(t, nil, c.name, "--help")
		if code != 0 || !strings.HasPrefix(stdout, "Usage: relay "+c.name) || !strings.Contains(stdout, "Exit codes:") {
			t.Errorf("relay %s --help: exit %d, stdout %q", c.name, code, stdout)
		}
	}
	if code, stdout, _ := runRelay(t, nil, "--help"); code != 0 || !strings.Contains(stdout, "Commands:") {
		t.Errorf("relay --help: exit %d", code)
	}
	for _, args := range [][]string{{}, {"nope"}, {"publish"}, {"publish", "mem://x"}, {"consume", "mem://x", "t", "--bogus"},
		{"bench", "mem://x", "t", "-n", "0"}, {"validate"}, {"publish", "mem://x", "t", "--data", "x", "--lines"}} {
		if code, _, stderr := runRelay(t, nil, args...); code != 2 {
			t.Errorf("relay %v: exit %d, want 2; stderr %s", args, code, stderr)
		}
	}
}

// TestCLIPublishConsume publishes with relay publish (binary stdin, key,
// headers, --count) and reads with relay consume (json and text, --no-ack
// then --ack), on Redis.
func TestCLIPublishConsume(t *testing.T) {
	holdBrokers(t)
	b := redisBackend(t)
	topic, group := "e2e-cli-"+id(), "g-"+id()
	provision(t, b, topic, group)
	payload := []byte{0, 1, 2, 0xfe, 0xff, 'x'}
	code, stdout, stderr := runRelay(t, bytes.NewReader(payload), "publish", b.pubURL, topic, "--key", "k-1", "--header", "a=1", "--header", "ü=✓ x")
	if code != 0 {
		t.Fatalf("publish: exit %d: %s", code, stderr)
	}
	firstID := strings.TrimSpace(stdout)
	if code, _, stderr := runRelay(t, nil, "publish", b.pubURL, topic, "--data", "hello", "--count", "2", "-q"); code != 0 {
		t.Fatalf("publish --count: exit %d: %s", code, stderr)
	}

	code, stdout, stderr = runRelay(t, nil, "consume", b.pubURL, topic, "--group", group, "--count", "3", "--format", "json", "--no-ack", "--timeout", "30s")
	if code != 0 {
		t.Fatalf("consume: exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("consume printed %d lines:\n%s", len(lines), stdout)
	}
	var first jsonMessage
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	got, _ := base64.StdEncoding.DecodeString(deref(first.PayloadBase64))
	if first.ID != firstID || first.Key != "k-1" || first.Topic != topic || !bytes.Equal(got, payload) ||
		len(first.Metadata) != 2 || first.Metadata["a"] != "1" || first.Metadata["ü"] != "✓ x" || first.Attempt != 1 {
		t.Errorf("first message: %s", lines[0])
	}
	var second jsonMessage
	_ = json.Unmarshal([]byte(lines[1]), &second)
	if deref(second.Payload) != "hello" || second.PayloadBase64 != nil {
		t.Errorf("second message: %s", lines[1])
	}

	// --no-ack left them to the group: they come again (attempt 2), and
	// are acked this time.
	code, stdout, stderr = runRelay(t, nil, "consume", testenv.WithParams(b.pubURL, "group", group), topic, "--count", "3", "--timeout", "60s")
	if code != 0 {
		t.Fatalf("consume again: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"id:       " + firstID, "key:      k-1", "  a: 1\n", "  ü: ✓ x\n", "payload (6 bytes, binary, Go-quoted):\n\"\\x00\\x01\\x02\\xfe\\xffx\"", "payload (5 bytes):\nhello\n", "attempt:  2"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("text output lacks %q:\n%s", want, stdout)
		}
	}
	// All acked: nothing is left, so --count 1 times out with exit 1.
	if code, _, stderr := runRelay(t, nil, "consume", b.pubURL, topic, "--group", group, "--count", "1", "--timeout", "2s"); code != 1 || !strings.Contains(stderr, "timeout after 0 of 1") {
		t.Errorf("consume of an empty group: exit %d, %s", code, stderr)
	}
	// --idle drains: it prints what is there and exits 0 once nothing
	// came for that long, also when nothing was there.
	if code, _, stderr := runRelay(t, nil, "publish", b.pubURL, topic, "--data", "last", "--count", "2", "-q"); code != 0 {
		t.Fatalf("publish: exit %d: %s", code, stderr)
	}
	code, stdout, stderr = runRelay(t, nil, "consume", b.pubURL, topic, "--group", group, "--idle", "1s", "--format", "json")
	if n := strings.Count(stdout, `"payload":"last"`); code != 0 || n != 2 || !strings.Contains(stderr, "relay consume: no message for 1s; 2 message(s)") {
		t.Errorf("consume --idle: exit %d, %d messages\nstdout %s\nstderr %s", code, n, stdout, stderr)
	}
	if code, stdout, stderr := runRelay(t, nil, "consume", b.pubURL, topic, "--group", group, "--idle", "500ms"); code != 0 || stdout != "" ||
		!strings.Contains(stderr, "no message for 500ms; 0 message(s)") {
		t.Errorf("consume --idle of an empty group: exit %d\nstdout %q\nstderr %s", code, stdout, stderr)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func TestCLIBench(t *testing.T) {
	holdBrokers(t)
	b := redisBackend(t)
	code, stdout, stderr := runRelay(t, nil, "bench", b.pubURL, "e2e-bench-"+id(), "-n", "3000", "-size", "200", "-batch", "50")
	if code != 0 {
		t.Fatalf("bench: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"messages:    3000 × 200 bytes, batch 50, 4 publisher(s)", "publish:     3000 in ", "consume:     3000 in ", "duplicates:  0", "publish call latency: p50 ", "end-to-end latency:   p50 "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("bench output lacks %q:\n%s", want, stdout)
		}
	}
}

// TestPoisonAndReplay: a bridge poisons a message the destination rejects
// (larger than RabbitMQ's max_bytes) to a poison topic on the source; relay
// replay then sends it back to its original topic without the poison
// metadata.
func TestPoisonAndReplay(t *testing.T) {
	bs := backends(t)
	r, a := bs[0], bs[1]
	run := id()
	in, out := "e2e-p-in-"+run, "e2e-p-out-"+run
	provision(t, r, in, "check-"+run)
	provision(t, r, in+".poison", "ops-"+run)
	provision(t, a, out, "reader-"+run)
	rd := newReader(t, a, out, "reader-"+run)
	br := startBridge(t, fmt.Sprintf(`routes:
  - name: poisoning
    from: {url: %q, topic: %s, group: bridge-%s}
    to: {url: %q, topic: %s}
    poison: {topic: %s.poison}
`, r.pubURL, in, run, testenv.WithParams(a.pubURL, "max_bytes", "1000"), out, in))
	small, big := relay.NewMessage([]byte("fits")), relay.NewMessage(bytes.Repeat([]byte("B"), 4000))
	big.Key = "big-key"
	publish(t, r, in, big, small)
	if !rd.waitUnique(1, time.Minute) {
		t.Fatal("small message not forwarded")
	}
	if v := br.waitMetric(`relay_bridge_poisoned_total{route="poisoning"}`, 1); v != 1 {
		t.Fatalf("poisoned_total = %v; stderr:\n%s", v, br.err.String())
	}
	if code := br.signal(syscall.SIGTERM, time.Minute); code != 0 {
		t.Errorf("bridge exit %d", code)
	}

	code, stdout, stderr := runRelay(t, nil, "consume", r.pubURL, in+".poison", "--group", "ops-"+run, "--count", "1", "--no-ack", "--format", "json", "--timeout", "30s")
	if code != 0 {
		t.Fatalf("consume poison: exit %d: %s", code, stderr)
	}
	var pm jsonMessage
	if err := json.Unmarshal([]byte(stdout), &pm); err != nil {
		t.Fatal(err)
	}
	if pm.ID == big.ID || pm.Metadata["relay-poison-original-id"] != big.ID || pm.Metadata["relay-poison-topic"] != in || pm.Metadata["relay-poison-handler"] != "poisoning" ||
		pm.Metadata["relay-poison-permanent"] != "true" || !strings.Contains(pm.Metadata["relay-poison-reason"], "limit 1000") || deref(pm.Payload) != string(big.Payload) {
		t.Errorf("poisoned copy: %.600s", stdout)
	}

	code, stdout, stderr = runRelay(t, nil, "replay", r.pubURL, in+".poison", "--group", "ops-"+run, "--idle", "3s", "--rate", "10")
	if code != 0 || stdout != "replayed "+big.ID+" to "+in+"\n" || !strings.Contains(stderr, "replayed 1 message(s) from 1 poison copy; 1 to "+in) {
		t.Fatalf("replay: exit %d\nstdout %q\nstderr %s", code, stdout, stderr)
	}
	// The check group of the source topic saw big, small and the replayed big.
	code, stdout, stderr = runRelay(t, nil, "consume", r.pubURL, in, "--group", "check-"+run, "--count", "3", "--format", "json", "--timeout", "30s")
	if code != 0 {
		t.Fatalf("consume check: exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var replayed jsonMessage
	_ = json.Unmarshal([]byte(lines[2]), &replayed)
	if replayed.ID != big.ID || replayed.Key != "big-key" || deref(replayed.Payload) != string(big.Payload) || len(replayed.Metadata) != 0 {
		t.Errorf("replayed message: %s", lines[2])
	}
}

// TestDryRun: --dry-run reports each endpoint, exits 4 when one is
// unreachable, and never prints the password.
func TestDryRun(t *testing.T) {
	holdBrokers(t)
	r := redisBackend(t)
	cfg := writeFile(t, "dry.yaml", fmt.Sprintf(`routes:
  - name: dry
    from: {url: %q, topic: a, group: g}
    to: {url: "amqp://user:${SECRET}@127.0.0.1:1/?connect_timeout=1s"}
`, r.pubURL))
	p := startEnv(t, []string{"SECRET=s3cr3t-pw"}, nil, "bridge", "-c", cfg, "--dry-run", "--timeout", "5s")
	<-p.done
	out := p.out.String()
	if p.code != 4 {
		t.Errorf("exit %d, want 4\nstdout:\n%s\nstderr:\n%s", p.code, out, p.err.String())
	}
	if !regexpMatch(`(?m)^dry +source +redis://\S+ +a +ok \(`, out) || !regexpMatch(`(?m)^dry +destination +amqp://user:xxxxx@127\.0\.0\.1:1/\S* +a +UNREACHABLE: `, out) {
		t.Errorf("dry-run table:\n%s", out)
	}
	if strings.Contains(out+p.err.String(), "s3cr3t-pw") {
		t.Error("dry run leaked the password")
	}
}

// TestNotReadyWhileADestinationIsDown: a route whose destination cannot be
// reached keeps the bridge running but not ready, /readyz says why without
// the password, and SIGTERM still exits 0.
func TestNotReadyWhileADestinationIsDown(t *testing.T) {
	holdBrokers(t)
	r := redisBackend(t)
	run := id()
	cfg := fmt.Sprintf(`routes:
  - name: up
    from: {url: %q, topic: a-%s, group: g}
    to: {url: %q, topic: b-%s}
  - name: down
    from: {url: %q, topic: c-%s, group: g}
    to: {url: "amqp://user:${SECRET}@127.0.0.1:1/?connect_timeout=1s"}
`, r.pubURL, run, r.pubURL, run, r.pubURL, run)
	br := startBridgeEnv(t, cfg, []string{"SECRET=s3cr3t-pw"}, false)
	var body string
	for range 100 {
		var code int
		code, body = br.get("/readyz")
		// Route up may still be connecting when route down has already
		// failed: wait for both.
		if code == 503 && strings.Contains(body, "route down: not connected: open destination amqp://user:xxxxx@127.0.0.1:1/") && !strings.Contains(body, "route up") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(body, "route down: not connected: open destination amqp://user:xxxxx@127.0.0.1:1/") || strings.Contains(body, "route up") {
		t.Errorf("/readyz:\n%s", body)
	}
	if code, _ := br.get("/healthz"); code != 200 {
		t.Errorf("/healthz = %d", code)
	}
	if v := br.metric(`relay_bridge_endpoint_up{end="source",route="up"}`); v != 1 {
		t.Errorf("route up: source up = %v", v)
	}
	if v := br.metric(`relay_bridge_endpoint_up{end="destination",route="down"}`); v != 0 {
		t.Errorf("route down: destination up = %v", v)
	}
	if code := br.signal(syscall.SIGTERM, time.Minute); code != 0 {
		t.Errorf("exit %d", code)
	}
	if strings.Contains(body+br.err.String(), "s3cr3t-pw") {
		t.Error("the password leaked")
	}
}
