package bridge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/bridge"
)

// getRoutes fetches /routes from h and decodes it, also as a generic map
// for the field names.
func getRoutes(t *testing.T, b *bridge.Bridge) (bridge.Status, map[string]any, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	b.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/routes", nil))
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("/routes = %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	var st bridge.Status
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatalf("/routes: %v\n%s", err, rec.Body)
	}
	var raw map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	return st, raw, rec.Body.String()
}

// waitRoute polls /routes until ok holds for the route at index i; it
// fails the test with the last body after 30s.
func waitRoute(t *testing.T, b *bridge.Bridge, i int, what string, ok func(bridge.RouteStatus) bool) bridge.RouteStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, _, body := getRoutes(t, b)
		if ok(st.Routes[i]) {
			return st.Routes[i]
		}
		if time.Now().After(deadline) {
			t.Fatalf("/routes: no %s after 30s:\n%s", what, body)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// /routes reports exact counts after forwarding a known number of
// messages, in_flight back at 0, the redacted endpoints, the state, and
// keeps its documented field names.
func TestRoutesReportsForwarding(t *testing.T) {
	a, dst := "mem://"+uniq("a"), "mem://"+uniq("b")
	br, err := bridge.New(bridge.Config{Name: "live", Routes: []bridge.Route{{
		Name: "orders",
		From: bridge.Source{URL: a + "?inflight=64", Topic: "in", Group: "bridge"},
		To:   bridge.Destination{URL: dst, Topic: "out"},
	}}}, bridge.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	st, _, _ := getRoutes(t, br)
	if st.Started != nil || st.Routes[0].State != bridge.StateStopped || st.Routes[0].Ready {
		t.Errorf("before Run: started %v, state %q, ready %v", st.Started, st.Routes[0].State, st.Routes[0].Ready)
	}
	provision(t, dst, "reader", "out")
	before := time.Now()
	stop := runBridge(t, br)

	const n = 25
	msgs := make([]*relay.Message, n)
	for i := range msgs {
		msgs[i] = relay.NewMessage(bytes.Repeat([]byte{'x'}, 100+i))
	}
	publish(t, a, "in", msgs...)
	consume(t, dst, "reader", "out", n)
	rs := waitRoute(t, br, 0, "forwarded=25 with nothing in flight", func(rs bridge.RouteStatus) bool {
		return rs.Forwarded == n && rs.InFlight == 0 && rs.SourceLag != nil
	})
	if rs.Name != "orders" || rs.State != bridge.StateRunning || !rs.Ready || rs.NotReady != nil {
		t.Errorf("name %q state %q ready %v (%v)", rs.Name, rs.State, rs.Ready, rs.NotReady)
	}
	if rs.From != (bridge.RouteEnd{URL: a + "?inflight=64", Topic: "in", Group: "bridge"}) || rs.To != (bridge.RouteEnd{URL: dst, Topic: "out"}) {
		t.Errorf("from %+v to %+v", rs.From, rs.To)
	}
	if rs.InFlightBytes != 0 || rs.Retries != 0 || rs.Failed != 0 || rs.Poisoned != 0 || rs.Looped != 0 || rs.Duplicates != 0 || rs.LastError != nil {
		t.Errorf("route = %+v", rs)
	}
	if *rs.SourceLag < 0 {
		t.Errorf("source_lag = %d", *rs.SourceLag)
	}
	if rs.ForwardedPerSecAvg <= 0 {
		t.Errorf("forwarded_per_sec_avg = %v after forwarding %d", rs.ForwardedPerSecAvg, n)
	}

	st, raw, _ := getRoutes(t, br)
	if st.Bridge != "live" || st.Started == nil || st.Started.Before(before.Add(-time.Second)) || st.Time.Before(*st.Started) {
		t.Errorf("bridge %q started %v time %v", st.Bridge, st.Started, st.Time)
	}
	keys := func(m map[string]any) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	if got := keys(raw); !slices.Equal(got, []string{"bridge", "routes", "started", "time"}) {
		t.Errorf("top-level fields %v", got)
	}
	route := raw["routes"].([]any)[0].(map[string]any)
	want := []string{"duplicates", "failed", "forwarded", "forwarded_per_sec_10s", "forwarded_per_sec_avg", "from",
		"in_flight", "in_flight_bytes", "last_error", "looped", "name", "not_ready", "poisoned", "ready", "retries",
		"source_lag", "state", "to"}
	if got := keys(route); !slices.Equal(got, want) {
		t.Errorf("route fields %v, want %v", got, want)
	}
	if route["last_error"] != nil || route["not_ready"] != nil {
		t.Errorf("last_error %v, not_ready %v: want null", route["last_error"], route["not_ready"])
	}

	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rs = waitRoute(t, br, 0, "stopped", func(rs bridge.RouteStatus) bool { return rs.State == bridge.StateStopped })
	if rs.Forwarded != n || rs.Ready {
		t.Errorf("after drain: forwarded %d ready %v", rs.Forwarded, rs.Ready)
	}
}

// While messages flow, the 10-second rate is above zero.
func TestRoutesRateWhileForwarding(t *testing.T) {
	a, dst := "mem://"+uniq("a"), "mem://"+uniq("b")
	br, err := bridge.New(bridge.Config{Routes: []bridge.Route{{
		Name: "r", From: bridge.Source{URL: a, Topic: "t", Group: "g"}, To: bridge.Destination{URL: dst},
	}}}, bridge.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	stop := runBridge(t, br)
	pub, err := relay.OpenPublisher(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			_ = pub.Publish(ctx, "t", relay.NewMessage([]byte("tick")))
			time.Sleep(time.Millisecond)
		}
	}()
	rs := waitRoute(t, br, 0, "forwarded_per_sec_10s > 0", func(rs bridge.RouteStatus) bool { return rs.ForwardedPerSec10s > 0 })
	cancel()
	wg.Wait()
	if rs.Forwarded == 0 || rs.ForwardedPerSecAvg <= 0 {
		t.Errorf("forwarded %d at %v/s on average", rs.Forwarded, rs.ForwardedPerSecAvg)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// failScheme is a destination whose every Publish fails with an error that
// quotes a URL with a password, as a careless adapter might.
const failScheme = "routestest-fail"

func init() { relay.Register(failScheme, failOpener{}) }

type failOpener struct{}

func (failOpener) OpenPublisher(context.Context, *url.URL) (relay.Publisher, error) {
	return failPublisher{}, nil
}

func (failOpener) OpenSubscriber(context.Context, *url.URL) (relay.Subscriber, error) {
	return nil, relay.ErrNotSupported
}

type failPublisher struct{}

func (failPublisher) Publish(context.Context, string, ...*relay.Message) error {
	return errors.New("broker amqp://ops:hunter2@10.0.0.1:5672/ refused the message")
}

func (failPublisher) Close() error { return nil }

// A destination that fails shows in last_error (redacted, with a recent
// time), in retries and failed, and the destination URL is redacted.
func TestRoutesReportsLastError(t *testing.T) {
	a := "mem://" + uniq("a")
	br, err := bridge.New(bridge.Config{Routes: []bridge.Route{{
		Name:  "down",
		From:  bridge.Source{URL: a, Topic: "t", Group: "g"},
		To:    bridge.Destination{URL: failScheme + "://user:s3cret@host/?password=p4ss"},
		Retry: &bridge.Retry{MaxAttempts: 2, InitialInterval: time.Millisecond},
	}}}, bridge.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	stop := runBridge(t, br)
	before := time.Now()
	publish(t, a, "t", relay.NewMessage([]byte("doomed")))
	rs := waitRoute(t, br, 0, "a failed delivery", func(rs bridge.RouteStatus) bool { return rs.Failed >= 1 && rs.LastError != nil })
	after := time.Now()
	if rs.Retries < 1 || rs.Forwarded != 0 {
		t.Errorf("retries %d forwarded %d", rs.Retries, rs.Forwarded)
	}
	le := rs.LastError
	if !strings.HasSuffix(le.Message, `publish to "t": broker amqp://ops:xxxxx@10.0.0.1:5672/ refused the message`) {
		t.Errorf("last_error.message = %q", le.Message)
	}
	if le.Time.Before(before.Add(-time.Millisecond)) || le.Time.After(after) {
		t.Errorf("last_error.time = %v, want between %v and %v", le.Time, before, after)
	}
	if rs.To.URL != failScheme+"://user:xxxxx@host/?password=xxxxx" {
		t.Errorf("to.url = %q", rs.To.URL)
	}
	_, _, body := getRoutes(t, br)
	for _, secret := range []string{"s3cret", "p4ss", "hunter2"} {
		if strings.Contains(body, secret) {
			t.Errorf("/routes leaks %q:\n%s", secret, body)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
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

// Run logs one "route summary" line per route every SummaryInterval, with
// the route's counts.
func TestSummaryLogLine(t *testing.T) {
	a, dst := "mem://"+uniq("a"), "mem://"+uniq("b")
	var logs syncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	br, err := bridge.New(bridge.Config{
		Log: bridge.LogConfig{SummaryInterval: 10 * time.Millisecond},
		Routes: []bridge.Route{
			{Name: "busy", From: bridge.Source{URL: a, Topic: "t", Group: "g"}, To: bridge.Destination{URL: dst}},
			{Name: "idle", From: bridge.Source{URL: a, Topic: "u", Group: "g"}, To: bridge.Destination{URL: dst}},
		},
	}, bridge.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	provision(t, dst, "reader", "t")
	stop := runBridge(t, br)
	publish(t, a, "t", relay.NewMessage([]byte("1")), relay.NewMessage([]byte("2")), relay.NewMessage([]byte("3")))
	consume(t, dst, "reader", "t", 3)

	// summaries returns the latest summary line of each route.
	summaries := func() map[string]map[string]any {
		out := map[string]map[string]any{}
		for _, line := range strings.Split(logs.String(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "route summary" {
				continue
			}
			out[rec["route"].(string)] = rec
		}
		return out
	}
	deadline := time.Now().Add(30 * time.Second)
	var got map[string]map[string]any
	for {
		got = summaries()
		if b := got["busy"]; b != nil && b["forwarded"] == 3.0 && b["in_flight"] == 0.0 && got["idle"] != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no summary with forwarded=3 after 30s; logs:\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	busy, idle := got["busy"], got["idle"]
	if busy["level"] != "INFO" || busy["state"] != "running" || busy["bridge"] != "relay-bridge" || busy["retries"] != 0.0 || busy["poisoned"] != 0.0 {
		t.Errorf("busy summary = %v", busy)
	}
	if idle["forwarded"] != 0.0 || idle["state"] != "running" {
		t.Errorf("idle summary = %v", idle)
	}
	for _, k := range []string{"forwarded_per_sec_10s", "in_flight_bytes", "failed", "source_lag"} {
		if _, ok := busy[k]; !ok {
			t.Errorf("busy summary lacks %s: %v", k, busy)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// A negative SummaryInterval turns the summary off.
func TestSummaryOff(t *testing.T) {
	a, dst := "mem://"+uniq("a"), "mem://"+uniq("b")
	var logs syncBuffer
	br, err := bridge.New(bridge.Config{
		Log:    bridge.LogConfig{SummaryInterval: -1},
		Routes: []bridge.Route{{Name: "r", From: bridge.Source{URL: a, Topic: "t", Group: "g"}, To: bridge.Destination{URL: dst}}},
	}, bridge.Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if br.Config().Log.SummaryInterval != -1 {
		t.Fatalf("SummaryInterval = %v", br.Config().Log.SummaryInterval)
	}
	stop := runBridge(t, br)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "route summary") {
		t.Errorf("summary logged while off:\n%s", logs.String())
	}
}

// A route whose destination cannot be opened is retrying, not ready, and
// its last error says why.
func TestRoutesReportsRetrying(t *testing.T) {
	br, err := bridge.New(routeTo("urlfront-down://x"), bridge.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- br.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	rs := waitRoute(t, br, 0, "state retrying", func(rs bridge.RouteStatus) bool { return rs.State == bridge.StateRetrying })
	if rs.Ready || rs.NotReady == nil || !strings.Contains(*rs.NotReady, "connection refused") ||
		rs.LastError == nil || !strings.Contains(rs.LastError.Message, "open destination urlfront-down://x: connection refused") {
		t.Errorf("route = %+v (not_ready %v, last_error %+v)", rs, rs.NotReady, rs.LastError)
	}
}
