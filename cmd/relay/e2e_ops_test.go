package main

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-relay/relay"
)

// TestOppositeBridgesDoNotLoop runs two bridge processes at once, RabbitMQ →
// Kafka and Kafka → RabbitMQ on the same topic, as during a migration:
// every message reaches the other side exactly once and nothing comes back.
func TestOppositeBridgesDoNotLoop(t *testing.T) {
	bs := backends(t)
	a, k := bs[1], bs[2] // amqp, kafka
	run := id()
	topic := "e2e-orders-" + run
	cfg := func(name string, from, to backend) string {
		return fmt.Sprintf(`name: %s
routes:
  - name: %s
    from: {url: %q, topic: %s, group: bridge-%s}
    to: {url: %q}
`, name, name, from.pubURL, topic, run, to.pubURL)
	}
	provision(t, a, topic, "app-"+run)
	provision(t, k, topic, "app-"+run)
	appA := newReader(t, a, topic, "app-"+run)
	appK := newReader(t, k, topic, "app-"+run)
	toKafka := startBridge(t, cfg("amqp-to-kafka", a, k))
	toAMQP := startBridge(t, cfg("kafka-to-amqp", k, a))

	const n = 50
	var fromA, fromK []*relay.Message
	for i := range n {
		fromA = append(fromA, relay.NewMessage([]byte("published on rabbitmq "+strconv.Itoa(i))))
		fromK = append(fromK, relay.NewMessage([]byte("published on kafka "+strconv.Itoa(i))))
	}
	publish(t, a, topic, fromA...)
	publish(t, k, topic, fromK...)
	for side, r := range map[string]*reader{"rabbitmq": appA, "kafka": appK} {
		if !r.waitUnique(2*n, time.Minute) {
			t.Fatalf("%s side got %d of %d messages", side, r.unique(), 2*n)
		}
	}
	for route, br := range map[string]*proc{"amqp-to-kafka": toKafka, "kafka-to-amqp": toAMQP} {
		for metric, want := range map[string]float64{"forwarded_total": n, "looped_total": n} {
			name := fmt.Sprintf(`relay_bridge_%s{route="%s"}`, metric, route)
			if got := br.waitMetric(name, want); got != want {
				t.Errorf("%s = %v, want %v", name, got, want)
			}
		}
	}
	for _, br := range []*proc{toKafka, toAMQP} {
		if code := br.signal(syscall.SIGTERM, time.Minute); code != 0 {
			t.Errorf("exit code %d; stderr:\n%s", code, br.err.String())
		}
	}
	// With the bridges stopped, a sentinel on each side shows what else
	// arrived meanwhile: nothing.
	sentinel := relay.NewMessage([]byte("sentinel"))
	publish(t, a, topic, sentinel)
	publish(t, k, topic, sentinel)
	for side, r := range map[string]*reader{"rabbitmq": appA, "kafka": appK} {
		if !r.waitUnique(2*n+1, time.Minute) {
			t.Fatalf("%s side: sentinel missing", side)
		}
		msgs, ids := r.snapshot()
		if len(msgs) != 2*n+1 || len(ids) != 2*n+1 {
			t.Errorf("%s side got %d deliveries of %d messages, want %d of %d (a loop or a duplicate)", side, len(msgs), len(ids), 2*n+1, 2*n+1)
		}
		for _, m := range append(fromA, fromK...) {
			if ids[m.ID] != 1 {
				t.Errorf("%s side got %s %d times", side, m.ID, ids[m.ID])
			}
		}
	}
}

// TestBrokenConfigExactErrors: relay validate and relay bridge print every
// problem of a broken config with its position, exit 3, and never print
// the password that came from the environment.
func TestBrokenConfigExactErrors(t *testing.T) {
	file := writeFile(t, "broken.yaml", `name: migration
log:
  level: verbose
http:
  adress: 0.0.0.0:9470
routes:
  - name: orders
    from:
      url: amqp://app:${RABBIT_PASSWORD}@rabbit:5672/
      topic: orders
    to:
      url: kafka://kafka:9092
      topic: orders
    concurrency: -1
  - name: orders
    from: {url: "pulsar://x", topic: t, group: g}
    to: {url: "redis://${REDIS_HOST}:6379/0"}
    retry: {max_attempts: three}
`)
	want := []string{
		file + `:3:10: log.level: "verbose": want debug, info, warn or error`,
		file + `:5:3: http.adress: unknown field (did you mean "address"?); known fields here: address, disabled, profiling`,
		file + `:8:5: routes[0].from.group: required (or group= in the URL): bridges in one group share the work`,
		file + `:14:18: routes[0].concurrency: -1: want 1 to 4096`,
		file + `:15:11: routes[1].name: "orders" is already the name of routes[0]`,
		file + `:16:17: routes[1].from.url: unknown URL scheme "pulsar" (this binary has: ` + strings.Join(relay.Schemes(), ", ") + `)`,
		file + `:17:15: routes[1].to.url: environment variable REDIS_HOST is not set (use ${REDIS_HOST:-default} for a default)`,
		file + `:18:27: routes[1].retry.max_attempts: "three": want a whole number`,
		"relay: " + file + ": 8 problem(s)",
	}
	env := []string{"RABBIT_PASSWORD=hunter2"}
	for _, cmd := range [][]string{{"validate", "-c", file}, {"bridge", "-c", file}} {
		code, stdout, stderr := runRelayEnv(t, env, nil, cmd...)
		if code != 3 {
			t.Errorf("relay %s: exit %d, want 3", cmd[0], code)
		}
		got := strings.Split(strings.TrimSpace(stderr), "\n")
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("relay %s printed:\n%s\nwant:\n%s", cmd[0], stderr, strings.Join(want, "\n"))
		}
		if strings.Contains(stdout+stderr, "hunter2") {
			t.Errorf("relay %s leaked the password", cmd[0])
		}
	}
	// A valid config: exit 0 and a one-line confirmation.
	ok := writeFile(t, "ok.yaml", "routes:\n- {name: r, from: {url: 'redis://127.0.0.1:6379/0', topic: a, group: g}, to: {url: 'amqp://guest:${PASS:-guest}@127.0.0.1:5672/'}}\n")
	if code, stdout, stderr := runRelay(t, nil, "validate", "-c", ok); code != 0 || stdout != ok+": ok (1 route(s))\n" {
		t.Errorf("valid config: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestSIGTERMDrains stops the bridge with SIGTERM in the middle of a
// stream: it exits 0 after settling what it had in flight, so a restarted
// bridge delivers the rest with no duplicate at all.
func TestSIGTERMDrains(t *testing.T) {
	const total = 5000
	bs := backends(t)
	for i, from := range bs {
		to := bs[(i+1)%len(bs)]
		t.Run(from.name+"-to-"+to.name, func(t *testing.T) {
			run := id()
			in, out, group := "e2e-term-in-"+run, "e2e-term-out-"+run, "bridge-"+run
			cfg := routeYAML("term", from, in, group, to, out, "    concurrency: 32\n")
			provision(t, from, in, group)
			provision(t, to, out, "reader-"+run)
			rd := newReader(t, to, out, "reader-"+run)
			var msgs []*relay.Message
			for j := range total {
				msgs = append(msgs, relay.NewMessage([]byte(strconv.Itoa(j))))
			}
			publish(t, from, in, msgs...)
			br := startBridge(t, cfg)
			if !rd.waitUnique(total/5, time.Minute) {
				t.Fatalf("only %d arrived; stderr:\n%s", rd.unique(), br.err.String())
			}
			if code := br.signal(syscall.SIGTERM, time.Minute); code != 0 {
				t.Fatalf("exit code after SIGTERM = %d; stderr:\n%s", code, br.err.String())
			}
			if !strings.Contains(br.err.String(), `msg="route drained"`) {
				t.Errorf("no drain in the log:\n%s", br.err.String())
			}
			atStop := rd.unique()
			br2 := startBridge(t, cfg)
			if !rd.waitUnique(total, 2*time.Minute) {
				t.Fatalf("%d of %d arrived after the restart; stderr:\n%s", rd.unique(), total, br2.err.String())
			}
			if code := br2.signal(syscall.SIGTERM, time.Minute); code != 0 {
				t.Errorf("second bridge: exit code %d", code)
			}
			all, ids := rd.snapshot()
			t.Logf("%s → %s: stopped after %d of %d, %d duplicates", from.name, to.name, atStop, total, len(all)-len(ids))
			if len(all) != len(ids) {
				// A graceful stop loses nothing and repeats nothing of its
				// own accord; a duplicate is acceptable only where the
				// bridge logged a broker call it had to retry (a publish
				// answered too late, a commit refused), which is
				// at-least-once doing its job.
				retries := retryLines(br.err.String(), br2.err.String())
				report := describeDuplicates(all, ids)
				if len(retries) == 0 {
					t.Errorf("%d duplicates after a graceful stop, want 0, and neither bridge logged a retry:\n%s\nfirst bridge stderr:\n%s",
						len(all)-len(ids), report, br.err.String())
				} else {
					t.Logf("%d duplicates after a graceful stop, explained by retried broker calls:\n%s\n%s",
						len(all)-len(ids), report, strings.Join(retries, "\n"))
				}
			}
		})
	}
}

// retryLines returns the log lines of bridge stderr outputs that record a
// broker call being retried or failing (adapter retries, AWS SDK retries,
// failed commits).
func retryLines(outputs ...string) []string {
	var out []string
	for _, o := range outputs {
		for _, line := range strings.Split(o, "\n") {
			l := strings.ToLower(line)
			if strings.Contains(l, "retrying") || strings.Contains(l, "commit failed") || strings.Contains(l, "commit on revocation failed") {
				out = append(out, line)
			}
		}
	}
	return out
}

// describeDuplicates lists the IDs delivered more than once with the
// attempt number of each delivery.
func describeDuplicates(all []*relay.Message, ids map[string]int) string {
	attempts := map[string][]int{}
	for _, m := range all {
		if ids[m.ID] > 1 {
			attempts[m.ID] = append(attempts[m.ID], m.Attempt())
		}
	}
	var b strings.Builder
	for id, a := range attempts {
		fmt.Fprintf(&b, "  %s delivered %d times, attempts %v\n", id, len(a), a)
	}
	return b.String()
}
