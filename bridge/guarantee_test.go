package bridge_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/bridge"
)

func TestParseGuarantee(t *testing.T) {
	src := `routes:
  - name: fast
    from: {url: mem://a, topic: t, group: g}
    to: {url: mem://b}
    guarantee: at-most-once
  - name: safe
    from: {url: mem://a, topic: u, group: g}
    to: {url: mem://b}
`
	c, err := bridge.Parse([]byte(src), "b.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	d := c.WithDefaults()
	if g := d.Routes[0].Guarantee; g != relay.AtMostOnce {
		t.Errorf("fast: %v; want at-most-once", g)
	}
	if d.Routes[0].Retry != nil {
		t.Errorf("fast: default retry %+v on an at-most-once route", *d.Routes[0].Retry)
	}
	if g := d.Routes[1].Guarantee; g != relay.AtLeastOnce || d.Routes[1].Retry == nil {
		t.Errorf("safe: %v, retry %v; want the default at-least-once with the default retry", g, d.Routes[1].Retry)
	}
}

func TestValidateGuarantee(t *testing.T) {
	src := `routes:
  - name: eo
    from: {url: "kafka://k:9092", topic: t, group: g}
    to: {url: "kafka://k2:9092"}
    guarantee: exactly-once
  - name: amo
    from: {url: mem://a, topic: t, group: g}
    to: {url: mem://b}
    guarantee: at-most-once
    retry: {max_attempts: 3}
    poison: {topic: t.poison}
  - name: bad
    from: {url: mem://a, topic: t, group: g}
    to: {url: mem://b}
    guarantee: twice
`
	_, err := bridge.Parse([]byte(src), "b.yaml", nil)
	if err == nil {
		t.Fatal("Parse accepted the config")
	}
	want := []string{
		`b.yaml:5:16: routes[0].guarantee: exactly-once is not available for route "eo" (kafka:// to kafka://): relay/kafka: transactional_id: required for a transactional client: a name stable across restarts and unique per running instance (for example <service>-<instance>); relay/kafka: seed: exactly-once needs the source and the destination on one Kafka cluster (one transaction holds the outputs and the source offsets); got source [k:9092] and destination [k2:9092]; or use at-least-once with dedup for an exactly-once effect`,
		`b.yaml:10:12: routes[1].retry: route "amo" is at-most-once: its source is acked before the publish, which is tried once; remove retry or use guarantee: at-least-once`,
		`b.yaml:11:13: routes[1].poison: route "amo" is at-most-once: a failed publish is lost, not kept for another try; remove poison or use guarantee: at-least-once`,
		`b.yaml:15:16: routes[2].guarantee: "twice": want at-most-once, at-least-once or exactly-once`,
	}
	var ce *bridge.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("%T %v; want a *ConfigError", err, err)
	}
	var got []string
	for _, p := range ce.Problems {
		got = append(got, p.String())
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The Go form is checked the same way.
	c := bridge.Config{Routes: []bridge.Route{{Name: "eo", From: bridge.Source{URL: "mem://a", Topic: "t", Group: "g"},
		To: bridge.Destination{URL: "mem://b"}, Guarantee: relay.ExactlyOnce}}}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `exactly-once is not available for route "eo" (mem:// to mem://): relay: the mem:// adapter offers no exactly-once pair`) {
		t.Fatalf("Validate: %v", err)
	}
}

// lagOf returns how many messages of topic group has not acked at url.
func lagOf(t *testing.T, url, group, topic string) int64 {
	t.Helper()
	sub, err := relay.OpenSubscriber(context.Background(), url+"?group="+group)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	n, err := sub.(relay.LagReporter).Lag(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func waitLagOf(t *testing.T, url, group, topic string, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := lagOf(t, url, group, topic)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s/%s: lag %d; want %d", url, topic, group, n, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAtMostOnceRoute forwards 20 messages at-most-once, after one the
// destination rejects (too large): the rejected one is acked at the source
// and lost, never retried or redelivered; the others arrive once each.
func TestAtMostOnceRoute(t *testing.T) {
	a, b := "mem://"+uniq("a"), "mem://"+uniq("b")
	br, err := bridge.New(bridge.Config{Routes: []bridge.Route{{
		Name:        "r",
		From:        bridge.Source{URL: a, Topic: "in", Group: "bridge"},
		To:          bridge.Destination{URL: b + "?max_bytes=1000", Topic: "out"},
		Concurrency: 1, // the rejected message is handled before the others
		Guarantee:   relay.AtMostOnce,
	}}}, bridge.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	provision(t, a, "bridge", "in")
	provision(t, b, "reader", "out")
	big := relay.NewMessage(bytes.Repeat([]byte("x"), 5000))
	in := []*relay.Message{big}
	for i := range 20 {
		in = append(in, relay.NewMessage([]byte(fmt.Sprint(i))))
	}
	publish(t, a, "in", in...)
	stop := runBridge(t, br)

	got := consume(t, b, "reader", "out", 20)
	seen := map[string]int{}
	for _, m := range got {
		seen[m.ID]++
	}
	for _, m := range in[1:] {
		if seen[m.ID] != 1 {
			t.Errorf("message %s forwarded %d times; want once", m.ID, seen[m.ID])
		}
	}
	// The source has nothing left (the rejected message was acked), and
	// the destination got nothing more.
	waitLagOf(t, a, "bridge", "in", 0)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := lagOf(t, b, "reader", "out"); n != 0 {
		t.Fatalf("destination has %d more messages; want none", n)
	}
}
