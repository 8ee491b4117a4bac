package bridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/bridge"
)

// switchScheme is a destination that refuses every message while the
// switch named by its host is down (see newSwitch), and takes them
// otherwise.
const switchScheme = "routestest-switch"

func init() { relay.Register(switchScheme, switchOpener{}) }

var switches sync.Map // host -> *atomic.Bool (down)

// newSwitch returns a fresh switch and the URL of a destination behind it.
func newSwitch() (*atomic.Bool, string) {
	host := uniq("switch")
	down := new(atomic.Bool)
	switches.Store(host, down)
	return down, switchScheme + "://" + host + "/"
}

type switchOpener struct{}

func (switchOpener) OpenPublisher(_ context.Context, u *url.URL) (relay.Publisher, error) {
	down, ok := switches.Load(u.Host)
	if !ok {
		return nil, errors.New("no such switched destination")
	}
	return switchPublisher{down.(*atomic.Bool)}, nil
}

func (switchOpener) OpenSubscriber(context.Context, *url.URL) (relay.Subscriber, error) {
	return nil, relay.ErrNotSupported
}

type switchPublisher struct{ down *atomic.Bool }

func (p switchPublisher) Publish(context.Context, string, ...*relay.Message) error {
	if p.down.Load() {
		return errors.New("destination " + strings.Repeat("down ", 60) + "(a long error, as a broker's can be)")
	}
	return nil
}

func (switchPublisher) Close() error { return nil }

// A route whose destination failed and works again: /routes keeps the
// last error with recovered_at set (after the error), the recovery is
// logged once with the error, and the summary lines stop repeating the
// error; a new failure makes the error live again.
func TestRoutesReportRecovery(t *testing.T) {
	a := "mem://" + uniq("a")
	down, dst := newSwitch()
	down.Store(true)
	var logs syncBuffer
	br, err := bridge.New(bridge.Config{
		Log: bridge.LogConfig{SummaryInterval: 10 * time.Millisecond},
		Routes: []bridge.Route{{
			Name:  "switched",
			From:  bridge.Source{URL: a, Topic: "t", Group: "g"},
			To:    bridge.Destination{URL: dst},
			Retry: &bridge.Retry{MaxAttempts: 2, InitialInterval: time.Millisecond},
		}},
	}, bridge.Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	stop := runBridge(t, br)
	publish(t, a, "t", relay.NewMessage([]byte("first")))
	live := waitRoute(t, br, 0, "a live error", func(rs bridge.RouteStatus) bool { return rs.Failed >= 1 && rs.LastError != nil })
	if live.LastError.RecoveredAt != nil {
		t.Fatalf("recovered_at = %v while the destination is down", live.LastError.RecoveredAt)
	}
	if _, raw, _ := getRoutes(t, br); !strings.Contains(mustJSON(t, raw), `"recovered_at":null`) {
		t.Errorf("/routes lacks recovered_at: null while the error is live: %s", mustJSON(t, raw))
	}
	waitLog(t, &logs, "a summary repeating the live error", func(rec map[string]any) bool {
		return rec["msg"] == "route summary" && strings.Contains(str(rec["last_error"]), "destination down down")
	})

	// The destination comes back: the nacked message goes through, and
	// the next ticks of the monitor see the route work.
	down.Store(false)
	rs := waitRoute(t, br, 0, "recovered_at", func(rs bridge.RouteStatus) bool {
		return rs.LastError != nil && rs.LastError.RecoveredAt != nil
	})
	le := rs.LastError
	if rs.Forwarded < 1 || !strings.Contains(le.Message, "destination down down") || !le.RecoveredAt.After(le.Time) {
		t.Errorf("after recovery: forwarded %d, last_error %+v (recovered_at %v)", rs.Forwarded, le, le.RecoveredAt)
	}
	// The status page shows it recovered, not as a live error.
	rec := httptest.NewRecorder()
	br.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if page := rec.Body.String(); !regexp.MustCompile(`<td class="last-error recovered"><span class="recovered-at">recovered <time datetime="[^"]+" title="[^"]+">\d+ s ago</time> from</span><span class="msg">[^<]*destination down down `).MatchString(page) {
		t.Errorf("the page does not show the error recovered:\n%s", page)
	}
	mark := logs.String()
	waitLog(t, &logs, "two summaries after the recovery", func(map[string]any) bool {
		return strings.Count(strings.TrimPrefix(logs.String(), mark), `"msg":"route summary"`) >= 2
	})
	var recoveries []map[string]any
	for _, rec := range logLines(logs.String()) {
		if rec["msg"] == "route recovered" {
			recoveries = append(recoveries, rec)
		}
	}
	// The monitor marks the recovery and logs the summaries on one
	// goroutine: every summary after mark comes after the recovery.
	for _, rec := range logLines(strings.TrimPrefix(logs.String(), mark)) {
		if rec["msg"] == "route summary" && rec["last_error"] != nil {
			t.Errorf("a summary after the recovery repeats the error: %v", rec)
		}
	}
	if len(recoveries) != 1 || !strings.Contains(str(recoveries[0]["last_error"]), "destination down down") || recoveries[0]["route"] != "switched" {
		t.Errorf("want one \"route recovered\" line with the error, got %v", recoveries)
	}

	// It fails again: the new error is live.
	down.Store(true)
	publish(t, a, "t", relay.NewMessage([]byte("second")))
	rs = waitRoute(t, br, 0, "a live error again", func(rs bridge.RouteStatus) bool {
		return rs.Failed >= 2 && rs.LastError != nil && rs.LastError.RecoveredAt == nil
	})
	if !rs.LastError.Time.After(le.Time) {
		t.Errorf("new error at %v, not after the first (%v)", rs.LastError.Time, le.Time)
	}
	rec = httptest.NewRecorder()
	br.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if page := rec.Body.String(); !regexp.MustCompile(`<td class="last-error"><span class="msg">[^<]*destination down down `).MatchString(page) || strings.Contains(page, `class="recovered-at"`) {
		t.Errorf("the page does not show the new error live:\n%s", page)
	}
	down.Store(false) // let the bridge drain the message
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func logLines(s string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(s, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil {
			out = append(out, rec)
		}
	}
	return out
}

// waitLog waits (up to 30s) for a log line that ok accepts.
func waitLog(t *testing.T, logs *syncBuffer, what string, ok func(map[string]any) bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		for _, rec := range logLines(logs.String()) {
			if ok(rec) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 30s; logs:\n%s", what, logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
