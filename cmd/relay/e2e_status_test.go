package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/bridge"
)

// TestStatus runs a bridge with a working route and one whose destination
// is down, and checks relay status: the table (state and exact counts),
// --json (the /routes document), the last error without the password, the
// summary log line, and exit 1 naming the address when nothing answers.
func TestStatus(t *testing.T) {
	holdBrokers(t)
	r := redisBackend(t)
	run := id()
	cfg := fmt.Sprintf(`name: e2e-status
log: {summary_interval: 100ms}
routes:
  - name: up
    from: {url: %q, topic: a-%s, group: g}
    to: {url: %q, topic: b-%s}
  - name: down
    from: {url: %q, topic: c-%s, group: g}
    to: {url: "amqp://user:${SECRET}@127.0.0.1:1/?connect_timeout=1s"}
`, r.pubURL, run, r.pubURL, run, r.pubURL, run)
	provision(t, r, "b-"+run, "reader")
	rd := newReader(t, r, "b-"+run, "reader")
	br := startBridgeEnv(t, cfg, []string{"SECRET=s3cr3t-pw"}, false)

	const n = 7
	msgs := make([]*relay.Message, n)
	for i := range msgs {
		msgs[i] = relay.NewMessage([]byte(strings.Repeat("p", i)))
	}
	publish(t, r, "a-"+run, msgs...)
	if !rd.waitUnique(n, time.Minute) {
		t.Fatalf("%d of %d messages forwarded; stderr:\n%s", rd.unique(), n, br.err.String())
	}

	// --json, until the route settled its last message and the other one
	// failed at least once.
	var st bridge.Status
	var out string
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, stdout, stderr := runRelay(t, nil, "status", "--http", br.addr, "--json")
		if code != 0 {
			t.Fatalf("relay status --json: exit %d: %s", code, stderr)
		}
		out = stdout
		st = bridge.Status{}
		if err := json.Unmarshal([]byte(stdout), &st); err != nil {
			t.Fatalf("relay status --json: %v\n%s", err, stdout)
		}
		if len(st.Routes) == 2 && st.Routes[0].Forwarded == n && st.Routes[0].InFlight == 0 && st.Routes[1].LastError != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("relay status --json after 30s:\n%s", stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	up, down := st.Routes[0], st.Routes[1]
	if st.Bridge != "e2e-status" || up.Name != "up" || up.State != bridge.StateRunning || !up.Ready || up.Failed != 0 || up.SourceLag == nil {
		t.Errorf("up = %+v", up)
	}
	if down.Name != "down" || (down.State != bridge.StateRetrying && down.State != bridge.StateStarting) || down.Ready ||
		down.To.URL != "amqp://user:xxxxx@127.0.0.1:1/?connect_timeout=1s" ||
		!strings.Contains(down.LastError.Message, "open destination amqp://user:xxxxx@127.0.0.1:1/") {
		t.Errorf("down = %+v, last error %+v", down, down.LastError)
	}

	code, table, stderr := runRelay(t, nil, "status", "--http", br.addr)
	if code != 0 {
		t.Fatalf("relay status: exit %d: %s", code, stderr)
	}
	for _, re := range []string{
		`(?m)^bridge e2e-status, up \S+, 2 route\(s\)`,
		`(?m)^ROUTE\s+STATE\s+FORWARDED\s+PER SEC \(10s\)\s+IN FLIGHT\s+LAG\s+RETRIES\s+FAILED\s+POISONED\s+FROM\s+TO$`,
		fmt.Sprintf(`(?m)^up\s+running\s+%d\s+\d+\.\d\s+0 \(0 B\)\s+(\d+|-)\s+0\s+0\s+0\s+redis://\S+ a-%s\s+redis://\S+ b-%s$`, n, run, run),
		`(?m)^down\s+(retrying|starting)\s+0\s+0\.0\s+0 \(0 B\)\s+(\d+|-)\s+0\s+0\s+0\s+`,
		`(?m)^down: last error \S+ ago \(\S+\): .*open destination amqp://user:xxxxx@127\.0\.0\.1:1/`,
	} {
		if !regexpMatch(re, table) {
			t.Errorf("relay status output lacks %s:\n%s", re, table)
		}
	}

	// The status page, server-rendered, and its address in the log.
	resp, err := http.Get("http://" + br.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" ||
		!strings.Contains(string(page), `<tr class="route state-running" data-route="up">`) ||
		!strings.Contains(string(page), fmt.Sprintf(`<td class="num forwarded"><span class="forwarded-count">%d</span></td>`, n)) ||
		!strings.Contains(string(page), `data-route="down"`) || strings.Contains(string(page), "s3cr3t-pw") {
		t.Errorf("GET / = %d %q:\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), page)
	}
	if want := "status_page=http://" + br.addr + "/"; !strings.Contains(br.err.String(), want) {
		t.Errorf("the bridge's log lacks %s:\n%s", want, br.err.String())
	}

	// The summary line, every 100ms.
	want := fmt.Sprintf(`msg="route summary" bridge=e2e-status route=up state=running forwarded=%d `, n)
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(br.err.String(), want); {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the bridge's stderr:\n%s", want, br.err.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := br.signal(syscall.SIGTERM, time.Minute); code != 0 {
		t.Errorf("bridge exit %d", code)
	}
	if strings.Contains(out+table+br.err.String(), "s3cr3t-pw") {
		t.Error("the password leaked")
	}

	// Nothing listens there any more.
	code, _, stderr = runRelay(t, nil, "status", "--http", br.addr)
	if code != 1 || !strings.Contains(stderr, "relay status: no bridge answers at "+br.addr+": ") {
		t.Errorf("relay status on a stopped bridge: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runRelay(t, nil, "status", "--http", "nohostport"); code != 1 || !strings.Contains(stderr, "no bridge answers at nohostport") {
		t.Errorf("relay status --http nohostport: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runRelay(t, nil, "bridge", "-c", "missing.yaml", "--log-summary-interval", "soon"); code != 2 ||
		!strings.Contains(stderr, `--log-summary-interval "soon": want a duration such as 30s or 1m, or off`) {
		t.Errorf("relay bridge --log-summary-interval soon: exit %d, stderr %q", code, stderr)
	}
}

// --log-summary-interval overrides log.summary_interval: off in the file,
// 50ms on the command line.
func TestSummaryIntervalFlag(t *testing.T) {
	file := writeFile(t, "bridge.yaml", `log: {summary_interval: off}
routes:
  - {name: m, from: {url: "mem://a", topic: t, group: g}, to: {url: "mem://b"}}
`)
	p := startEnv(t, nil, nil, "bridge", "-c", file, "--http", "off", "--log-summary-interval", "50ms")
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(p.err.String(), `msg="route summary" bridge=relay-bridge route=m state=running forwarded=0 `); {
		if time.Now().After(deadline) {
			t.Fatalf("no summary line after 20s; stderr:\n%s", p.err.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code := p.signal(syscall.SIGTERM, time.Minute); code != 0 {
		t.Errorf("exit %d; stderr:\n%s", code, p.err.String())
	}
}
