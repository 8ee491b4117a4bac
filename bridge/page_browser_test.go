package bridge_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/bridge"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// slowScheme is a destination that takes 2 ms per message and keeps
// nothing: a backlog drains slowly enough to watch.
const slowScheme = "pagetest-slow"

func init() { relay.Register(slowScheme, slowOpener{}) }

type slowOpener struct{}

func (slowOpener) OpenPublisher(context.Context, *url.URL) (relay.Publisher, error) {
	return slowPublisher{}, nil
}

func (slowOpener) OpenSubscriber(context.Context, *url.URL) (relay.Subscriber, error) {
	return nil, relay.ErrNotSupported
}

type slowPublisher struct{}

func (slowPublisher) Publish(ctx context.Context, _ string, msgs ...*relay.Message) error {
	select {
	case <-time.After(time.Duration(len(msgs)) * 2 * time.Millisecond):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (slowPublisher) Close() error { return nil }

// pageRow is what the test reads of one route's row in the page's DOM.
type pageRow struct {
	Name, State, From, To, Forwarded, Rate, Lag, Trend string
	InFlight, Retries, Failed, Poisoned, LastError     string
	// LastErrorColor is the computed color of the error's text; Recovered
	// whether the cell is marked recovered.
	LastErrorColor      string
	Recovered           bool
	RatePoints          int
	RateLast            float64
	RateLabel, LagLabel string
}

// pageDOM is what the test reads of the whole page.
type pageDOM struct {
	Title, Caption, Conn string
	Updates              int
	RowHeaders           int // th scope=row
	ColHeaders           int // th scope=col
	Rows                 []pageRow
	Resources            []string // every src/href attribute
}

const readPageJS = `(() => {
	const q = (root, sel) => { const e = root.querySelector(sel); return e ? e.textContent.trim() : ""; };
	const rows = Array.from(document.querySelectorAll("#routes-body tr.route")).map(tr => {
		const rc = tr.querySelector("svg.rate-chart"), lc = tr.querySelector("svg.lag-chart");
		return {
			Name: tr.dataset.route, State: q(tr, ".badge"), From: q(tr, ".end-from"), To: q(tr, ".end-to"),
			Forwarded: q(tr, ".forwarded-count"), Rate: q(tr, ".rate-now"), Lag: q(tr, ".lag-now"),
			Trend: q(tr, ".trend"), InFlight: q(tr, ".in-flight"), Retries: q(tr, ".retries"),
			Failed: q(tr, ".failed"), Poisoned: q(tr, ".poisoned"), LastError: q(tr, ".last-error"),
			LastErrorColor: tr.querySelector(".last-error .msg") ? getComputedStyle(tr.querySelector(".last-error .msg")).color : "",
			Recovered: tr.querySelector(".last-error").classList.contains("recovered"),
			RatePoints: rc ? Number(rc.dataset.points) : -1,
			RateLast: rc && rc.dataset.last ? Number(rc.dataset.last) : -1,
			RateLabel: rc ? rc.getAttribute("aria-label") : "",
			LagLabel: lc ? lc.getAttribute("aria-label") : "",
		};
	});
	return {
		Title: document.title, Caption: q(document, "#routes caption"), Conn: q(document, "#conn"),
		Updates: Number(document.body.dataset.updates || 0),
		RowHeaders: document.querySelectorAll("#routes tbody th[scope=row]").length,
		ColHeaders: document.querySelectorAll("#routes thead th[scope=col]").length,
		Rows: rows,
		Resources: Array.from(document.querySelectorAll("[src],[href]")).map(e => e.getAttribute("src") || e.getAttribute("href")),
	};
})()`

// The status page in a real headless Chromium: a bridge forwards a steady
// stream on one route while a second route's destination refuses every
// message; the page, refreshing from /routes, shows both routes' state,
// a forwarded count above the one of the first snapshot, a rate and a
// chart drawn from the samples the page kept, the retried and poisoned
// message and its redacted error (in red: it is live), and a route that
// failed and recovered shows "recovered" and its error muted. The browser
// loads nothing but the
// bridge's own URLs and reports no script error or policy violation; with
// JavaScript disabled the server-rendered snapshot shows the same routes.
// A screenshot is written to $RELAY_TEST_SCREENSHOT (default: in the
// test's temporary directory). No Chromium process outlives the test.
func TestStatusPageInChromium(t *testing.T) {
	chromium := testenv.Chromium(t)
	src, dst := "mem://"+uniq("page-src"), "mem://"+uniq("page-dst")
	refundsDown, refundsURL := newSwitch() // fails, then recovers
	refundsDown.Store(true)
	// The routes stay running for the whole test (it checks the page, not
	// the cutover signal): a route whose source stays empty for
	// caught_up_after (5 s by default) would turn caught-up midway on a
	// slow machine.
	br, err := bridge.New(bridge.Config{Name: "orders-migration", Routes: []bridge.Route{{
		Name:          "orders",
		From:          bridge.Source{URL: src, Topic: "orders", Group: "relay-bridge"},
		To:            bridge.Destination{URL: dst, Topic: "orders"},
		CaughtUpAfter: time.Hour,
	}, {
		Name:          "payments",
		From:          bridge.Source{URL: src, Topic: "payments", Group: "relay-bridge"},
		To:            bridge.Destination{URL: slowScheme + "://ledger:7000/", Topic: "payments"},
		Concurrency:   1,
		Batch:         1,
		CaughtUpAfter: time.Hour,
	}, {
		Name:          "audit",
		From:          bridge.Source{URL: src, Topic: "audit", Group: "relay-bridge"},
		To:            bridge.Destination{URL: failScheme + "://ops:s3cret@audit-host:9000/", Topic: "audit"},
		Retry:         &bridge.Retry{MaxAttempts: 2, InitialInterval: time.Millisecond},
		Poison:        &bridge.Poison{Topic: "audit.poison", AfterDeliveries: 1},
		CaughtUpAfter: time.Hour,
	}, {
		Name:          "refunds",
		From:          bridge.Source{URL: src, Topic: "refunds", Group: "relay-bridge"},
		To:            bridge.Destination{URL: refundsURL, Topic: "refunds"},
		Retry:         &bridge.Retry{MaxAttempts: 1},
		CaughtUpAfter: time.Hour,
	}}}, bridge.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	// A backlog that the slow destination takes seconds to drain: the
	// source lag falls while the page looks.
	provision(t, src, "relay-bridge", "payments")
	backlog := make([]*relay.Message, 6000)
	for i := range backlog {
		backlog[i] = relay.NewMessage([]byte("payment"))
	}
	publish(t, src, "payments", backlog...)
	stopBridge := runBridge(t, br)
	// routesDown makes /routes answer 503, as a bridge that went away.
	var routesDown atomic.Bool
	handler := br.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if routesDown.Load() && r.URL.Path == "/routes" {
			http.Error(w, "down for the test", http.StatusServiceUnavailable)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	defer srv.Close()

	// The audit message is retried once, then poisoned.
	publish(t, src, "audit", relay.NewMessage([]byte("refused")))
	waitRoute(t, br, 2, "the audit message poisoned", func(rs bridge.RouteStatus) bool { return rs.Poisoned == 1 })
	// The refund fails once, then goes through: the route recovers.
	publish(t, src, "refunds", relay.NewMessage([]byte("refund")))
	waitRoute(t, br, 3, "the refund failed", func(rs bridge.RouteStatus) bool { return rs.LastError != nil })
	refundsDown.Store(false)
	waitRoute(t, br, 3, "the refunds route recovered", func(rs bridge.RouteStatus) bool {
		return rs.LastError != nil && rs.LastError.RecoveredAt != nil
	})

	// A steady stream on orders while the browser looks.
	pub, err := relay.OpenPublisher(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	streamCtx, stopStream := context.WithCancel(context.Background())
	var stream sync.WaitGroup
	stream.Add(1)
	go func() {
		defer stream.Done()
		for streamCtx.Err() == nil {
			msgs := make([]*relay.Message, 10)
			for i := range msgs {
				msgs[i] = relay.NewMessage(bytes.Repeat([]byte{'o'}, 256))
			}
			_ = pub.Publish(streamCtx, "orders", msgs...)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	defer func() { stopStream(); stream.Wait() }()
	firstForwarded := waitRoute(t, br, 0, "forwarding", func(rs bridge.RouteStatus) bool { return rs.Forwarded > 0 }).Forwarded

	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	bctx, stopBrowser := startChromium(t, ctx, chromium)
	var (
		mu       sync.Mutex
		requests []string
		problems []string
		outage   bool // /routes is down on purpose: its failed loads are expected
	)
	err = chromedp.Listen(bctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			requests = append(requests, e.Request.URL)
		case *runtime.EventExceptionThrown:
			problems = append(problems, fmt.Sprintf("exception: %s %+v", e.ExceptionDetails.Text, e.ExceptionDetails.Exception))
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning {
				problems = append(problems, "console."+string(e.Type))
			}
		case *cdplog.EventEntryAdded:
			if !outage && (e.Entry.Level == cdplog.EntryLevelError || e.Entry.Level == cdplog.EntryLevelWarning) {
				problems = append(problems, "log: "+e.Entry.Text)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}

	// The script refreshes every 0.3 s here (?refresh=): wait for three
	// refreshes, a rate chart of two points with a last rate above 0 on
	// orders, and the lag of payments falling (the source is asked every
	// 5 s, so this takes one or two such rounds).
	const ready = `(() => {
		const c = document.querySelector('tr[data-route="orders"] svg.rate-chart');
		const lag = document.querySelector('tr[data-route="payments"] td.lag');
		return Number(document.body.dataset.updates || 0) >= 3 && c !== null &&
			Number(c.dataset.points) >= 2 && Number(c.dataset.last) > 0 &&
			lag !== null && lag.dataset.trend === "falling";
	})()`
	err = chromedp.Do(bctx,
		command(network.Enable, network.EnableParams{}), command(cdplog.Enable, cdp.Empty{}),
		command(runtime.Enable, cdp.Empty{}),
		chromedp.EmulateViewport(1360, 440),
		chromedp.Navigate(srv.URL+"/?refresh=0.3"),
		chromedp.Poll[chromedp.Void](ready, chromedp.WithPollingTimeout(20*time.Second)),
	)
	if err != nil {
		partial, _ := chromedp.Run(bctx, chromedp.Evaluate[pageDOM](readPageJS))
		t.Fatalf("status page did not refresh with a rate: %v\npage: %+v", err, partial)
	}
	dom, err := chromedp.Run(bctx, chromedp.Evaluate[pageDOM](readPageJS))
	if err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	saveScreenshot(t, shot)

	if dom.Title != "relay bridge orders-migration" || dom.Caption != "Routes (4), in config order" ||
		dom.RowHeaders != 4 || dom.ColHeaders != 10 || !strings.HasPrefix(dom.Conn, "Live: refreshed from /routes every 0.3 s") {
		t.Errorf("page: title %q caption %q, %d row and %d column headers, status %q", dom.Title, dom.Caption, dom.RowHeaders, dom.ColHeaders, dom.Conn)
	}
	if len(dom.Rows) != 4 || dom.Rows[0].Name != "orders" || dom.Rows[1].Name != "payments" || dom.Rows[2].Name != "audit" || dom.Rows[3].Name != "refunds" {
		t.Fatalf("rows = %+v", dom.Rows)
	}
	orders, payments, audit, refunds := dom.Rows[0], dom.Rows[1], dom.Rows[2], dom.Rows[3]
	if orders.State != "running" || payments.State != "running" || audit.State != "running" {
		t.Errorf("states %q, %q, %q; want running", orders.State, payments.State, audit.State)
	}
	if lag := pageNumber(t, payments.Lag); lag >= int64(len(backlog)) ||
		!strings.HasPrefix(payments.Trend, "↓ falling: ") || !strings.HasSuffix(payments.LagLabel, " messages, falling.") {
		t.Errorf("payments lag %q (of a backlog of %d), trend %q, chart %q: want it falling", payments.Lag, len(backlog), payments.Trend, payments.LagLabel)
	}
	if from, to := "from orders @ "+src+" (group relay-bridge)", "to orders @ "+dst; orders.From != from || orders.To != to {
		t.Errorf("orders %q %q, want %q %q", orders.From, orders.To, from, to)
	}
	if n := pageNumber(t, orders.Forwarded); n <= firstForwarded {
		t.Errorf("orders forwarded %q in the page, want above %d (forwarded before the page opened)", orders.Forwarded, firstForwarded)
	}
	if !strings.HasSuffix(orders.Rate, " /s") || orders.Rate == "0.0 /s" {
		t.Errorf("orders rate %q, want a rate above 0", orders.Rate)
	}
	if orders.RatePoints < 2 || orders.RateLast <= 0 || !strings.HasPrefix(orders.RateLabel, "Forward rate over the last ") {
		t.Errorf("orders rate chart: %d points, last %v, label %q", orders.RatePoints, orders.RateLast, orders.RateLabel)
	}
	if orders.Lag == "" || orders.LagLabel == "" || orders.Trend == "" {
		t.Errorf("orders lag %q trend %q label %q", orders.Lag, orders.Trend, orders.LagLabel)
	}
	if orders.Retries != "0" || orders.Poisoned != "0" || orders.LastError != "none" {
		t.Errorf("orders retries %q poisoned %q last error %q", orders.Retries, orders.Poisoned, orders.LastError)
	}
	if audit.Forwarded != "0" || audit.Retries != "1" || audit.Poisoned != "1" || audit.Failed != "0" {
		t.Errorf("audit forwarded %q retries %q poisoned %q failed %q; want 0, 1, 1, 0", audit.Forwarded, audit.Retries, audit.Poisoned, audit.Failed)
	}
	if !strings.Contains(audit.LastError, "refused the message") || !strings.Contains(audit.LastError, "ops:xxxxx@10.0.0.1") ||
		audit.To != "to audit @ "+failScheme+"://ops:xxxxx@audit-host:9000/" {
		t.Errorf("audit last error %q, to %q", audit.LastError, audit.To)
	}
	// Live errors are red, recovered ones are not.
	if audit.Recovered || audit.LastErrorColor != "rgb(179, 38, 30)" {
		t.Errorf("audit's live error: recovered %v, color %q; want not recovered, red rgb(179, 38, 30)", audit.Recovered, audit.LastErrorColor)
	}
	if !refunds.Recovered || !regexp.MustCompile(`^recovered \d+ s ago from.*destination down`).MatchString(refunds.LastError) || refunds.LastErrorColor == audit.LastErrorColor {
		t.Errorf("refunds: recovered %v, last error %q, color %q; want recovered, said so, not red", refunds.Recovered, refunds.LastError, refunds.LastErrorColor)
	}

	// JavaScript off: the server-rendered snapshot, in a second tab. (The
	// test's Evaluate runs with the page's scripts disabled.)
	tab, closeTab := chromedp.NewContext(bctx)
	err = chromedp.Do(tab,
		command(emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}),
		chromedp.Navigate(srv.URL+"/"),
	)
	var noJS pageDOM
	var html string
	if err == nil {
		noJS, err = chromedp.Run(tab, chromedp.Evaluate[pageDOM](readPageJS))
	}
	if err == nil {
		html, err = chromedp.Run(tab, chromedp.Evaluate[string]("document.documentElement.outerHTML"))
	}
	closeTab()
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"s3cret", "hunter2"} {
		if strings.Contains(html, secret) {
			t.Errorf("the page leaks %q", secret)
		}
	}
	if noJS.Updates != 0 || len(noJS.Rows) != 4 || noJS.Rows[0].State != "running" ||
		pageNumber(t, noJS.Rows[0].Forwarded) == 0 || noJS.Rows[2].Poisoned != "1" || !noJS.Rows[3].Recovered || noJS.Rows[2].Recovered ||
		!strings.HasPrefix(noJS.Conn, "Server-rendered snapshot") {
		t.Errorf("without JavaScript: %+v", noJS)
	}

	// /routes stops answering: the page says so and keeps the last rows.
	mu.Lock()
	outage = true
	mu.Unlock()
	routesDown.Store(true)
	const stale = `document.getElementById("conn").classList.contains("stale")`
	if err := chromedp.Do(bctx, chromedp.Poll[chromedp.Void](stale, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("the page did not show that /routes is down: %v", err)
	}
	down, err := chromedp.Run(bctx, chromedp.Evaluate[pageDOM](readPageJS))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(down.Conn, "Cannot refresh from /routes (HTTP 503); showing the snapshot of ") ||
		len(down.Rows) != 4 || down.Rows[0].State != "running" {
		t.Errorf("with /routes down: status %q, %d rows", down.Conn, len(down.Rows))
	}

	stopBrowser()
	mu.Lock()
	for _, u := range requests {
		if !strings.HasPrefix(u, srv.URL+"/") {
			t.Errorf("the page requested %s: want only the bridge's own URLs", u)
		}
	}
	if len(requests) < 4 {
		t.Errorf("requests %v: want the page and at least three /routes", requests)
	}
	for _, p := range problems {
		t.Errorf("browser reported %s", p)
	}
	mu.Unlock()
	for _, r := range dom.Resources {
		if !strings.HasPrefix(r, "data:") && (strings.Contains(r, "://") || strings.HasPrefix(r, "//")) {
			t.Errorf("the page links %q: want relative links and data: only", r)
		}
	}
	stopStream()
	stream.Wait()
	if err := stopBridge(); err != nil {
		t.Fatal(err)
	}
}

// command is a protocol command as an action.
func command[P, R any](c cdp.Command[P, R], params P) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, c, params)
		return err
	})
}

// pageNumber parses a count the page shows ("1,843").
func pageNumber(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.ReplaceAll(s, ",", ""), 10, 64)
	if err != nil {
		t.Errorf("count %q: %v", s, err)
	}
	return n
}

// startChromium starts a headless Chromium for the test, with a fresh
// profile and none of its background connections (this machine's network
// refuses them). stop (also run at cleanup) closes it and then checks
// that no process of that profile is left, killing any it finds.
func startChromium(t *testing.T, ctx context.Context, path string) (bctx context.Context, stop func()) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("no-first-run", true),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	if err := chromedp.Do(bctx); err != nil { // starts the browser
		cancelBrowser()
		cancelAlloc()
		t.Fatalf("starting %s: %v", path, err)
	}
	profile := profileFlag(chromedp.FromContext(bctx).Browser.Process().Pid)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancelBrowser()
			cancelAlloc()
			if profile == "" {
				t.Errorf("could not read the browser's --user-data-dir: cannot check for leftover processes")
				return
			}
			if left := processesWith(profile); len(left) > 0 {
				t.Errorf("Chromium processes left after closing the browser: %v (killed now)", left)
				for _, pid := range left {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		})
	}
	t.Cleanup(stop)
	return bctx, stop
}

// profileFlag returns the --user-data-dir=... argument of process pid.
func profileFlag(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return ""
	}
	for _, arg := range strings.Split(string(b), "\x00") {
		if strings.HasPrefix(arg, "--user-data-dir=") {
			return arg
		}
	}
	return ""
}

// processesWith lists the processes that have arg on their command line.
func processesWith(arg string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		for _, a := range strings.Split(string(b), "\x00") {
			if a == arg {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// saveScreenshot writes png to $RELAY_TEST_SCREENSHOT or to the test's
// temporary directory, and logs where.
func saveScreenshot(t *testing.T, png []byte) {
	t.Helper()
	path := os.Getenv("RELAY_TEST_SCREENSHOT")
	if path == "" {
		path = filepath.Join(t.TempDir(), "bridge-status.png")
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	t.Logf("screenshot of the status page: %s (%d bytes)", path, len(png))
}
