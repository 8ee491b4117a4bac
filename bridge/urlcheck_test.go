package bridge_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/bridge"
)

// failingOpener is an adapter without relay.URLChecker whose opens fail
// with err; it counts the attempts.
type failingOpener struct {
	err   error
	opens *atomic.Int32
}

func (o failingOpener) OpenPublisher(context.Context, *url.URL) (relay.Publisher, error) {
	o.opens.Add(1)
	return nil, o.err
}

func (o failingOpener) OpenSubscriber(context.Context, *url.URL) (relay.Subscriber, error) {
	o.opens.Add(1)
	return nil, o.err
}

var (
	badURLOpens, downOpens atomic.Int32
)

func init() {
	relay.Register("urlfront-bad", failingOpener{&relay.URLError{URL: "urlfront-bad://x", Param: "nosuch", Reason: "unknown parameter"}, &badURLOpens})
	relay.Register("urlfront-down", failingOpener{errors.New("connection refused"), &downOpens})
}

func routeTo(dst string) bridge.Config {
	return bridge.Config{HTTP: bridge.HTTPConfig{Disabled: true}, Routes: []bridge.Route{
		{Name: "r", From: bridge.Source{URL: "mem://runcheck", Topic: "t", Group: "g"}, To: bridge.Destination{URL: dst}},
		{Name: "other", From: bridge.Source{URL: "mem://runcheck", Topic: "u", Group: "g"}, To: bridge.Destination{URL: "mem://runcheck-out"}},
	}}
}

// An endpoint whose adapter refuses its URL only when opened (no
// URLChecker) stops the bridge at once with a *ConfigError instead of
// being retried for ever; an unreachable one is retried.
func TestRunRefusesEndpointWithBadURL(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := bridge.New(routeTo("urlfront-bad://x?nosuch=1"), bridge.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = b.Run(ctx)
	var ce *bridge.ConfigError
	if !errors.As(err, &ce) || !errors.Is(err, relay.ErrBadURL) || ctx.Err() != nil {
		t.Fatalf("Run = %v (ctx %v), want a *ConfigError matching relay.ErrBadURL before ctx ends", err, ctx.Err())
	}
	if !strings.Contains(err.Error(), `route "r"`) || !strings.Contains(err.Error(), `"nosuch"`) {
		t.Errorf("Run = %v, want it to name the route and the parameter", err)
	}
	if n := badURLOpens.Load(); n != 1 {
		t.Errorf("bad URL opened %d times, want 1 (no retry)", n)
	}

	b, err = bridge.New(routeTo("urlfront-down://x"), bridge.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	for downOpens.Load() < 2 {
		select {
		case err := <-done:
			cancel()
			t.Fatalf("Run returned %v while the destination was only unreachable", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; errors.Is(err, relay.ErrBadURL) {
		t.Errorf("Run after cancel = %v", err)
	}
}

// Every endpoint URL is checked by its adapter without connecting: a
// mistyped parameter or a bad value is a problem naming the field, the
// route and the parameter; passwords stay out of the messages.
func TestValidateChecksEndpointParameters(t *testing.T) {
	src := `routes:
  - name: orders
    from: {url: 'redis://u:hunter2@127.0.0.1:1/0?group=g&confrim=true', topic: t}
    to: {url: 'amqp://u:hunter2@127.0.0.1:1/?prefetch=5'}
    poison: {url: 'mem://p?max_bytes=x', topic: t.poison}
  - name: audit
    from: {url: 'sqs://?region=us-east-1', topic: a, group: g}
    to: {url: 'kafka://127.0.0.1:1?acks=some'}
  - name: billing
    from: {url: 'sns://?region=us-east-1', topic: b}
    to: {url: 'mem://b?group=ignored&inflight=4&max_bytes=1024'}
  - name: ledger
    from: {url: 'sns://?region=us-east-1', topic: l, group: a.b}
    to: {url: 'mem://l'}
  - name: jobs
    from: {url: 'amqp://127.0.0.1:1/', topic: j, group: g, inflight: 70000}
    to: {url: 'mem://j'}
`
	_, err := bridge.Parse([]byte(src), "b.yaml", env(nil))
	var ce *bridge.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want *ConfigError", err)
	}
	want := []string{
		`b.yaml:3:17: routes[0].from.url: route "orders": parameter "confrim": unknown parameter`,
		`b.yaml:4:15: routes[0].to.url: route "orders": parameter "prefetch": unknown parameter`,
		`b.yaml:5:19: routes[0].poison.url: route "orders": parameter "max_bytes": "x" is not a positive byte count such as 1048576, 512KiB or 64MiB`,
		// The bridge's own message for a group on sqs://, not the adapter's as well.
		`b.yaml:7:61: routes[1].from.group: not used with sqs:// (the queue is the unit of competing consumers); use sns:// to give each group its own queue`,
		`b.yaml:8:15: routes[1].to.url: route "audit": parameter "acks": "some" is not one of all, leader, none`,
		`b.yaml:10:11: routes[2].from.group: required (or group= in the URL): bridges in one group share the work`,
		// The adapter's group rule, reported at the group field.
		`b.yaml:13:61: routes[3].from.group: route "ledger": parameter "group": "a.b" must be 1-60 characters of A-Z a-z 0-9 - _ (it is part of the queue name)`,
		// The bridge's from.inflight, checked by the adapter.
		`b.yaml:16:70: routes[4].from.inflight: route "jobs": parameter "inflight": at most 65535 (AMQP prefetch count)`,
	}
	var got []string
	for _, p := range ce.Problems {
		got = append(got, p.String())
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("a password leaks: %v", err)
	}
	// New refuses the config too, so the daemon never starts retrying it.
	var cfg bridge.Config
	cfg.Routes = []bridge.Route{{Name: "r", From: bridge.Source{URL: "mem://a?group=g&confrim=true", Topic: "t"},
		To: bridge.Destination{URL: "mem://b"}}}
	if _, err := bridge.New(cfg, bridge.Options{}); !errors.As(err, &ce) || !strings.Contains(err.Error(), `"confrim"`) {
		t.Errorf("New = %v, want a *ConfigError naming confrim", err)
	}
}

// The poison URL defaults to the source URL without group=, also when it
// has other parameters: every scheme of this module takes both sides'.
func TestPoisonURLDefaultKeepsParameters(t *testing.T) {
	c, err := bridge.Parse([]byte(`routes:
  - name: r
    from: {url: 'mem://a?group=g&inflight=8', topic: t}
    to: {url: 'mem://b'}
    poison: {topic: t.poison}
`), "b.yaml", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.WithDefaults().Routes[0].Poison.URL; got != "mem://a?inflight=8" {
		t.Errorf("poison URL = %q, want mem://a?inflight=8", got)
	}
}

// An unparseable URL is reported with relay's reason, never its password.
func TestValidateSaysWhyURLDoesNotParse(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://u:Hunter#2@h:6379/0": `routes[0].to.url: redis://u:xxxxx@h:6379/0: the user info (user:password@) holds reserved characters: passwords and user names must be percent-encoded; write "#" as %23`,
		"localhost:6379":              `routes[0].to.url: localhost:6379: no scheme: this looks like host:port`,
		"redis://h:70000/0":           `routes[0].to.url: redis://h:70000/0: port 70000 is out of range: want 1 to 65535`,
	} {
		err := bridge.Config{Routes: []bridge.Route{{Name: "r", From: bridge.Source{URL: "mem://a", Topic: "t", Group: "g"},
			To: bridge.Destination{URL: raw}}}}.Validate()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v\nwant %s", raw, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "Hunter") {
			t.Errorf("password leaked: %v", err)
		}
	}
}
