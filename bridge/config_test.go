package bridge_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-relay/relay"
	_ "github.com/go-relay/relay/adapters/memory"
	"github.com/go-relay/relay/bridge"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseValidConfig(t *testing.T) {
	src := `
name: migrate
log: {level: debug, format: json}
http:
  address: ":9999"
shutdown_timeout: 5s
routes:
  - name: orders
    from:
      url: mem://a?inflight=${INFLIGHT:-32}
      topic: orders
      group: ${GROUP}
    to:
      url: mem://b
    concurrency: 4
    retry: {max_attempts: 3, initial_interval: 10ms}
    poison: {topic: orders.poison, url: 'mem://p'}
    dedup: {ttl: 1h}
`
	c, err := bridge.Parse([]byte(src), "b.yaml", env(map[string]string{"GROUP": "bridge"}))
	if err != nil {
		t.Fatal(err)
	}
	d := c.WithDefaults()
	r := d.Routes[0]
	if r.From.URL != "mem://a?inflight=32" || r.From.Group != "bridge" || r.To.Topic != "orders" {
		t.Errorf("route = %+v", r)
	}
	if r.Concurrency != 4 || r.Retry.MaxAttempts != 3 || r.Retry.InitialInterval != 10*time.Millisecond || r.Retry.MaxInterval != bridge.DefaultRetryMax {
		t.Errorf("route options = %+v retry %+v", r, *r.Retry)
	}
	if r.Poison.URL != "mem://p" || r.Dedup.Store != "memory" || r.Dedup.TTL != time.Hour {
		t.Errorf("poison %+v dedup %+v", *r.Poison, *r.Dedup)
	}
	if d.Log.Format != "json" || d.HTTP.Address != ":9999" || d.ShutdownTimeout != 5*time.Second {
		t.Errorf("config = %+v", d)
	}
}

// TestParseReportsEveryProblem checks the exact problem lines: position,
// field path and message, for unknown fields, wrong types, missing values,
// unset variables and semantic errors, all at once and in file order.
func TestParseReportsEveryProblem(t *testing.T) {
	src := `name: ok
log:
  level: loud
htp:
  address: x
routes:
  - name: one
    from:
      url: mem://a
      topik: orders
      group: g
    to:
      url: amqp://u:${PASSWORD}@h/
    concurrency: many
  - name: one
    from: {url: "nope://x?password=hunter2", topic: t}
    to: {url: "mem://b", topic: t}
    retry: {max_interval: 1s, initial_interval: 2s}
    poison: {}
`
	_, err := bridge.Parse([]byte(src), "b.yaml", env(nil))
	var ce *bridge.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want *ConfigError", err)
	}
	want := []string{
		`b.yaml:3:10: log.level: "loud": want debug, info, warn or error`,
		`b.yaml:4:1: htp: unknown field (did you mean "http"?); known fields here: http, log, name, routes, shutdown_timeout`,
		`b.yaml:10:7: routes[0].from.topik: unknown field (did you mean "topic"?); known fields here: group, id, inflight, inflight_bytes, topic, url`,
		`b.yaml:8:5: routes[0].from.topic: required`,
		`b.yaml:13:12: routes[0].to.url: environment variable PASSWORD is not set (use ${PASSWORD:-default} for a default)`,
		`b.yaml:14:18: routes[0].concurrency: "many": want a whole number`,
		`b.yaml:15:11: routes[1].name: "one" is already the name of routes[0]`,
		`b.yaml:16:17: routes[1].from.url: unknown URL scheme "nope" (this binary has: ` + strings.Join(relay.Schemes(), ", ") + `)`,
		`b.yaml:16:11: routes[1].from.group: required (or group= in the URL): bridges in one group share the work`,
		`b.yaml:18:27: routes[1].retry.max_interval: 1s is less than initial_interval 2s`,
		`b.yaml:19:13: routes[1].poison.topic: required`,
		`b.yaml:19:13: routes[1].poison.url: required: from.url has parameters other than group=, which a publisher of its scheme may not accept`,
	}
	got := make([]string, len(ce.Problems))
	for i, p := range ce.Problems {
		got[i] = p.String()
	}
	// Problems are sorted by position; compare as sets with order checked
	// by line only, since some share a line.
	if strings.Join(sortedCopy(got), "\n") != strings.Join(sortedCopy(want), "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for i := 1; i < len(ce.Problems); i++ {
		if ce.Problems[i].Pos.Line < ce.Problems[i-1].Pos.Line {
			t.Errorf("problems not in file order: %v", got)
		}
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error leaks a password: %v", err)
	}
}

func sortedCopy(s []string) []string {
	c := append([]string(nil), s...)
	for i := range c {
		for j := i + 1; j < len(c); j++ {
			if c[j] < c[i] {
				c[i], c[j] = c[j], c[i]
			}
		}
	}
	return c
}

func TestParseSyntaxAndShapeErrors(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"empty", "", "f.yaml:1: the file is empty: want a mapping with at least routes"},
		{"syntax", "routes:\n  - name: a\n\tbad: x\n", "f.yaml:2: YAML syntax: found a tab character that violates indentation"},
		{"not a mapping", "- a\n- b\n", "f.yaml:1:1: want a mapping of http, log, name, routes, shutdown_timeout, got a list"},
		{"routes not a list", "routes: 3\n", `f.yaml:1:9: routes: want a list of routes, got "3"`},
		{"no routes", "name: x\n", "f.yaml:1:1: routes: at least one route is required"},
		{"duplicate", "routes: []\nroutes: []\n", "f.yaml:2:1: routes: duplicate field (first on line 1)"},
		{"two documents", "routes: []\n---\nname: x\n", "f.yaml:2:1: more than one YAML document: put everything in one"},
		{"bad duration", "shutdown_timeout: soon\nroutes: []\n", `f.yaml:1:19: shutdown_timeout: "soon": want a duration such as 500ms, 30s or 5m`},
		{"self loop", "routes:\n- name: r\n  from: {url: 'mem://a?group=g', topic: t}\n  to: {url: 'mem://a'}\n", "f.yaml:4:7: routes[0].to: route forwards t to itself"},
		{"group mismatch", "routes:\n- name: r\n  from: {url: 'mem://a?group=g', topic: t, group: h}\n  to: {url: 'mem://b'}\n", `f.yaml:3:51: routes[0].from.group: "h" differs from group="g" in the URL`},
		{"bad summary interval", "log: {summary_interval: -5s}\nroutes: []\n", `f.yaml:1:25: log.summary_interval: "-5s": want a duration such as 30s or 1m, or off`},
		{"bad env syntax", "name: ${1X}\nroutes: []\n", `f.yaml:1:7: name: invalid environment variable name "1X" in ${1X} (want letters, digits and _, not starting with a digit)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := bridge.Parse([]byte(tc.src), "f.yaml", env(nil))
			var ce *bridge.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v", err)
			}
			found := false
			for _, p := range ce.Problems {
				if strings.HasPrefix(p.String(), tc.want) {
					found = true
				}
			}
			if !found {
				t.Errorf("problems %v\nwant one starting with %q", ce.Problems, tc.want)
			}
		})
	}
}

// log.summary_interval takes a duration, or 0 or off to disable the
// summary lines; it defaults to 30s.
func TestParseSummaryInterval(t *testing.T) {
	for src, want := range map[string]time.Duration{
		"":                               bridge.DefaultSummaryInterval,
		"log: {summary_interval: 45s}\n": 45 * time.Second,
		"log: {summary_interval: off}\n": -1,
		"log: {summary_interval: 0}\n":   -1,
		"log: {summary_interval: 0s}\n":  -1,
	} {
		c, err := bridge.Parse([]byte(src+"routes: [{name: r, from: {url: 'mem://a', topic: t, group: g}, to: {url: 'mem://b'}}]\n"), "f.yaml", env(nil))
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		if got := c.WithDefaults().Log.SummaryInterval; got != want {
			t.Errorf("%q: SummaryInterval = %v, want %v", src, got, want)
		}
	}
}

func TestEnvExpansion(t *testing.T) {
	e := env(map[string]string{"A": "x", "EMPTY": ""})
	cases := map[string]string{
		"${A}":             "x",
		"${EMPTY}":         "",
		"${EMPTY:-d}":      "d",
		"${UNSET:-d e}":    "d e",
		"$${A}":            "${A}",
		"a$b":              "a$b",
		"pre-${A}-${A}$":   "pre-x-x$",
		"${UNSET:-}":       "",
		"${A:-ignored}":    "x",
		"p:${UNSET:-a:-b}": "p:a:-b",
	}
	for in, want := range cases {
		c, err := bridge.Parse([]byte("name: ok\nroutes:\n- name: r\n  from: {url: 'mem://a', group: g, topic: t}\n  to: {url: 'mem://b', topic: '"+in+"'}\n"), "f", e)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if got := c.Routes[0].To.Topic; got != want {
			t.Errorf("%q expanded to %q, want %q", in, got, want)
		}
	}
}

func TestValidateGoConfig(t *testing.T) {
	err := bridge.Config{Routes: []bridge.Route{{Name: "bad name!", From: bridge.Source{URL: "mem://x", Topic: "t"}}}}.Validate()
	var ce *bridge.ConfigError
	if !errors.As(err, &ce) {
		t.Fatal(err)
	}
	want := "routes[0].name: \"bad name!\": use letters, digits, '.', '_' and '-'\n" +
		"routes[0].from.group: required (or group= in the URL): bridges in one group share the work\n" +
		"routes[0].to.url: required"
	var got []string
	for _, p := range ce.Problems {
		got = append(got, p.String())
	}
	if strings.Join(got, "\n") != want {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), want)
	}
}

// from.inflight_bytes takes a size with a unit, reaches the source URL as
// inflight_bytes= (unless the URL sets it), and refuses what is not a size.
func TestParseInFlightBytes(t *testing.T) {
	src := `
routes:
  - name: big
    from: {url: "mem://a", topic: t, group: g, inflight_bytes: 16MiB}
    to: {url: "mem://b"}
  - name: url-wins
    from: {url: "mem://a?inflight_bytes=1024", topic: t, group: g, inflight_bytes: 2048}
    to: {url: "mem://b"}
`
	c, err := bridge.Parse([]byte(src), "b.yaml", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Routes[0].From.InFlightBytes; got != 16<<20 {
		t.Fatalf("inflight_bytes = %d, want %d", got, 16<<20)
	}
	urls := bridge.SourceURLs(c.WithDefaults())
	if !strings.Contains(urls[0], "inflight_bytes=16777216") {
		t.Errorf("source URL %q lacks inflight_bytes=16777216", urls[0])
	}
	if !strings.Contains(urls[1], "inflight_bytes=1024") || strings.Contains(urls[1], "2048") {
		t.Errorf("source URL %q: the URL's inflight_bytes= should win", urls[1])
	}
	_, err = bridge.Parse([]byte(`
routes:
  - name: r
    from: {url: "mem://a", topic: t, group: g, inflight_bytes: lots}
    to: {url: "mem://b"}
`), "c.yaml", env(nil))
	if err == nil || !strings.Contains(err.Error(), `routes[0].from.inflight_bytes: "lots": want a size`) {
		t.Fatalf("err = %v, want the inflight_bytes problem", err)
	}
}
