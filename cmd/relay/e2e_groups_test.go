package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/go-relay/relay/internal/testkit/testenv"
)

// noGroupDrops names the backends that keep nothing for a group that does
// not exist yet (RabbitMQ returns the message unroutable): there relay
// publish refuses a topic without a group. The others keep what is
// published for groups created later.
var noGroupDrops = map[string]bool{"postgres": true, "amqp": true, "sns": true}

// TestPublishWithoutAGroup publishes with relay publish to a topic no
// group was ever made for, on every backend, and checks what each really
// does: where the message would be lost, relay publish refuses (exit 1,
// nothing published, the provision hint), and publishes once a group is
// provisioned; elsewhere it publishes, and a group created afterwards
// receives the message.
func TestPublishWithoutAGroup(t *testing.T) {
	bs := append(backends(t), postgresBackend(t), natsBackend(t))
	for _, b := range bs {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			topic, group := "e2e-in-nogroup-"+id(), "late-"+id()
			code, stdout, stderr := runRelay(t, nil, "publish", b.pubURL, topic, "--data", "before any group")
			if !noGroupDrops[b.name] {
				if code != 0 {
					t.Fatalf("publish: exit %d: %s", code, stderr)
				}
				// Kept: a group made now still gets it.
				sub := b.subURL(group)
				code, out, stderr := runRelay(t, nil, "consume", sub, topic, "--count", "1", "--format", "json", "--timeout", "60s")
				if code != 0 || !strings.Contains(out, `"id":"`+strings.TrimSpace(stdout)+`"`) {
					t.Errorf("consume in a group created after the publish: exit %d\nstdout %s\nstderr %s", code, out, stderr)
				}
				return
			}
			hint := "provision a group first with `relay provision URL " + topic + " --group GROUP`"
			if code != 1 || stdout != "" || !strings.Contains(stderr, "relay publish: nothing published: relay/"+b.name+`: topic "`+topic+`" has no group (`) ||
				!strings.Contains(stderr, hint) {
				t.Fatalf("publish to a topic without a group: exit %d, want 1\nstdout %q\nstderr %s", code, stdout, stderr)
			}
			if code, _, stderr := runRelay(t, nil, "provision", b.pubURL, topic, "--group", group); code != 0 {
				t.Fatalf("provision: exit %d: %s", code, stderr)
			}
			code, stdout, stderr = runRelay(t, nil, "publish", b.pubURL, topic, "--data", "after provision")
			if code != 0 {
				t.Fatalf("publish after provision: exit %d: %s", code, stderr)
			}
			code, out, stderr := runRelay(t, nil, "consume", b.subURL(group), topic, "--count", "1", "--format", "json", "--timeout", "60s")
			if code != 0 || !strings.Contains(out, `"id":"`+strings.TrimSpace(stdout)+`"`) {
				t.Errorf("consume after provision: exit %d\nstdout %s\nstderr %s", code, out, stderr)
			}
		})
	}
}

// TestDryRunFindsTopicsWithoutGroup: relay bridge --dry-run asks every
// destination and poison topic whether a group would get what the route
// publishes: a PostgreSQL, RabbitMQ or SNS topic without one is NO GROUP
// (exit 4, with the provision hint), a Kafka topic keeps messages for
// groups created later (ok), a provisioned topic is ok; once the missing
// groups are provisioned the dry run passes.
func TestDryRunFindsTopicsWithoutGroup(t *testing.T) {
	holdBrokers(t)
	r, a, k, s, p := redisBackend(t), amqpBackend(t), kafkaBackend(t), snsBackend(t), postgresBackend(t)
	run := id()
	topic := func(name string) string { return "e2e-in-dry-" + name + "-" + run }
	provision(t, p, topic("pg-ready"), "app")
	cfg := writeFile(t, "dry.yaml", fmt.Sprintf(`routes:
  - name: to-pg
    from: {url: %[1]q, topic: in-%[2]s, group: g}
    to: {url: %[3]q, topic: %[4]s}
    poison: {url: %[3]q, topic: %[5]s}
  - name: to-amqp
    from: {url: %[1]q, topic: in-%[2]s, group: g}
    to: {url: %[6]q, topic: %[7]s}
  - name: to-sns
    from: {url: %[1]q, topic: in-%[2]s, group: g}
    to: {url: %[8]q, topic: %[9]s}
  - name: to-kafka
    from: {url: %[1]q, topic: in-%[2]s, group: g}
    to: {url: %[10]q, topic: %[11]s}
`, r.pubURL, run, p.pubURL, topic("pg"), topic("pg-ready"), a.pubURL, topic("amqp"), s.pubURL, topic("sns"), k.pubURL, topic("kafka")))

	code, stdout, stderr := runRelay(t, nil, "bridge", "-c", cfg, "--dry-run", "--timeout", "30s")
	if code != 4 || !strings.Contains(stderr, "relay bridge --dry-run: 3 topic(s) with no group to deliver to") {
		t.Errorf("dry run: exit %d, want 4\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, re := range []string{
		`(?m)^to-pg +destination +postgres://\S+ +` + topic("pg") + ` +NO GROUP: relay/postgres: topic "` + topic("pg") + `" has no group \(no row for it in \S+\.groups\): .*provision a group first with ` + "`relay provision URL " + topic("pg") + " --group GROUP`",
		`(?m)^to-pg +poison +postgres://\S+ +` + topic("pg-ready") + ` +ok \(\d+m?s\)$`,
		`(?m)^to-amqp +destination +amqp://\S+ +` + topic("amqp") + ` +NO GROUP: relay/amqp: topic "` + topic("amqp") + `" has no group \(exchange "` + topic("amqp") + `" does not exist, so no queue is bound to it\)`,
		`(?m)^to-sns +destination +sns:\S+ +` + topic("sns") + ` +NO GROUP: relay/sns: topic "` + topic("sns") + `" has no group \(SNS topic "` + topic("sns") + `" does not exist\)`,
		`(?m)^to-kafka +destination +kafka://\S+ +` + topic("kafka") + ` +ok \(\d+m?s\)$`,
		`(?m)^to-kafka +source +redis://\S+ +in-` + run + ` +ok \(`,
	} {
		if !regexpMatch(re, stdout) {
			t.Errorf("dry-run table lacks %s:\n%s", re, stdout)
		}
	}

	// Provisioned, each has a group: the dry run passes. RabbitMQ's
	// exchange now exists, and AMQP 0-9-1 cannot list its bindings:
	// the row says so.
	provision(t, p, topic("pg"), "app")
	provision(t, a, topic("amqp"), "app")
	provision(t, s, topic("sns"), "app")
	code, stdout, stderr = runRelay(t, nil, "bridge", "-c", cfg, "--dry-run", "--timeout", "30s")
	if code != 0 || strings.Contains(stdout, "NO GROUP") ||
		!regexpMatch(`(?m)^to-amqp +destination +amqp://\S+ +`+topic("amqp")+` +ok \(\d+m?s\); cannot tell whether a group gets its messages: exchange "`+topic("amqp")+`" exists, but AMQP 0-9-1 does not tell`, stdout) {
		t.Errorf("dry run after provisioning: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// TestPublishWarnsWhenBrokerCannotTell: MQTT 3.1.1 cannot list a topic's
// subscriptions, so relay publish cannot know whether a group would get
// the message; it publishes, and warns on stderr with the provision hint
// that a broker with no subscribed session drops it.
func TestPublishWarnsWhenBrokerCannotTell(t *testing.T) {
	url := testenv.MQTT(t)
	topic := "e2e-in-cannot-tell-" + id()
	code, stdout, stderr := runRelay(t, nil, "publish", url, topic, "--data", "maybe nobody")
	if code != 0 || strings.TrimSpace(stdout) == "" {
		t.Fatalf("publish: exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}
	for _, want := range []string{"relay publish: warning: ", "cannot tell whether topic", "relay provision URL " + topic + " --group GROUP"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}
