package bridge_test

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/go-relay/relay/bridge"
)

// GET / serves the status page with a server-rendered first snapshot: a
// table with a row header per route, its state and counts, every string
// escaped, and a Content-Security-Policy that allows exactly the page's
// inline style and script (by hash) and nothing from elsewhere.
func TestStatusPageFirstSnapshot(t *testing.T) {
	hostile := `<img src=x onerror="alert(1)">`
	br, err := bridge.New(bridge.Config{Name: "ops", Routes: []bridge.Route{{
		Name: "orders",
		From: bridge.Source{URL: "mem://" + uniq("a") + "?inflight=8", Topic: hostile, Group: "g"},
		To:   bridge.Destination{URL: "amqp://relay:s3cret@rabbit:5672/", Topic: "out"},
	}, {
		Name: "audit",
		From: bridge.Source{URL: "mem://" + uniq("b"), Topic: "audit", Group: "g"},
		To:   bridge.Destination{URL: "mem://" + uniq("c")},
	}}}, bridge.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	br.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	body := rec.Body.String()
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/html; charset=utf-8" || rec.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("GET / = %d %q %q\n%s", rec.Code, rec.Header().Get("Content-Type"), rec.Header().Get("Cache-Control"), body)
	}
	for _, want := range []string{
		`<title>relay bridge ops</title>`,
		`<caption>Routes (2), in config order</caption>`,
		`<tr class="route state-stopped" data-route="orders">`,
		`<th scope="row"><span class="route-name">orders</span>`,
		`<span class="end-to">to out @ amqp://relay:xxxxx@rabbit:5672/</span>`,
		`<span class="badge">stopped</span>`,
		`<td class="num forwarded"><span class="forwarded-count">0</span></td>`,
		`<span class="num rate-now">0.0 /s</span>`,
		`<span class="num lag-now">unknown</span>`,
		`<th scope="row"><span class="route-name">audit</span>`,
		`Started: <time id="started">not yet</time>`,
		`<noscript><meta http-equiv="refresh" content="10"></noscript>`,
		`&lt;img src=x onerror=&#34;alert(1)&#34;&gt;`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if n := strings.Count(body, `<th scope="col"`); n != 10 {
		t.Errorf("%d column headers, want 10", n)
	}
	for _, bad := range []string{hostile, "s3cret"} {
		if strings.Contains(body, bad) {
			t.Errorf("page contains %q", bad)
		}
	}

	// Nothing to load from elsewhere: no src= at all, every href relative
	// or data:, one inline <style> and one inline <script>.
	if tag := regexp.MustCompile(`<[a-zA-Z][^<>]*\ssrc=`).FindString(body); tag != "" {
		t.Errorf("page has a src= attribute: %s", tag)
	}
	for _, m := range regexp.MustCompile(`href="([^"]*)"`).FindAllStringSubmatch(body, -1) {
		if h := m[1]; strings.Contains(h, "//") && !strings.HasPrefix(h, "data:") {
			t.Errorf("page links %q", h)
		}
	}
	style := regexp.MustCompile(`(?s)<style>(.*?)</style>`).FindAllStringSubmatch(body, -1)
	script := regexp.MustCompile(`(?s)<script>(.*?)</script>`).FindAllStringSubmatch(body, -1)
	if len(style) != 1 || len(script) != 1 || strings.Count(body, "<script") != 1 || strings.Contains(body, "<link rel=\"stylesheet\"") {
		t.Fatalf("%d inline styles, %d inline scripts; want one of each and nothing else", len(style), len(script))
	}
	hash := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	csp := rec.Header().Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "style-src " + hash(style[0][1]), "script-src " + hash(script[0][1]),
		"connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
}

// Only "/" itself is the page (GET and HEAD): other paths stay 404, other
// methods get 405, and the other endpoints are unchanged.
func TestStatusPageOnlyAtRoot(t *testing.T) {
	br, err := bridge.New(bridge.Config{Routes: []bridge.Route{{
		Name: "r", From: bridge.Source{URL: "mem://" + uniq("a"), Topic: "t", Group: "g"}, To: bridge.Destination{URL: "mem://" + uniq("b")},
	}}}, bridge.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	h := br.Handler()
	for _, c := range []struct {
		method, path string
		code         int
		ctype        string
	}{
		{"GET", "/", 200, "text/html; charset=utf-8"},
		{"HEAD", "/", 200, "text/html; charset=utf-8"},
		{"POST", "/", 405, ""},
		{"GET", "/index.html", 404, ""},
		{"GET", "/nope", 404, ""},
		{"GET", "/routes/x", 404, ""},
		{"GET", "/routes", 200, "application/json"},
		{"GET", "/healthz", 200, "text/plain; charset=utf-8"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
		if rec.Code != c.code || (c.ctype != "" && rec.Header().Get("Content-Type") != c.ctype) {
			t.Errorf("%s %s = %d %q, want %d %q", c.method, c.path, rec.Code, rec.Header().Get("Content-Type"), c.code, c.ctype)
		}
	}
}
