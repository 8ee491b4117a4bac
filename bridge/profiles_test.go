package bridge_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-relay/relay/bridge"
)

// TestProfilingEndpoint: /debug/pprof/ is served only with
// http.profiling, and serves what `go tool pprof` reads (gzipped profile
// protobufs), text with debug=1, and clear errors for a bad request.
func TestProfilingEndpoint(t *testing.T) {
	newHandler := func(cfg string) http.Handler {
		c, err := bridge.Parse([]byte(cfg+`
routes:
  - name: r
    from: {url: "mem://`+uniq("a")+`", topic: t, group: g}
    to: {url: "mem://`+uniq("b")+`"}
`), "test.yaml", func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		br, err := bridge.New(*c, bridge.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		return br.Handler()
	}
	get := func(h http.Handler, path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec
	}

	off := newHandler("")
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/profile?seconds=1"} {
		if rec := get(off, p); rec.Code != http.StatusNotFound {
			t.Errorf("without profiling: GET %s = %d, want 404", p, rec.Code)
		}
	}
	if _, ok := http.DefaultServeMux.Handler(httptest.NewRequest("GET", "/debug/pprof/", nil)); ok != "" {
		t.Errorf("http.DefaultServeMux serves /debug/pprof/ (pattern %q): importing the bridge must not expose profiles", ok)
	}

	_, err := bridge.New(bridge.Config{HTTP: bridge.HTTPConfig{Disabled: true, Profiling: true}, Routes: []bridge.Route{{
		Name: "r", From: bridge.Source{URL: "mem://" + uniq("a"), Topic: "t", Group: "g"}, To: bridge.Destination{URL: "mem://" + uniq("b")},
	}}}, bridge.Options{Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), "http.profiling") {
		t.Errorf("profiling with the endpoint disabled: err %v, want a problem naming http.profiling", err)
	}

	on := newHandler("http: {profiling: true}")
	if rec := get(on, "/debug/pprof/"); rec.Code != 200 || !strings.Contains(rec.Body.String(), "goroutine") {
		t.Errorf("index: %d %q", rec.Code, rec.Body.String())
	}
	for _, p := range []string{"/debug/pprof/heap", "/debug/pprof/goroutine", "/debug/pprof/profile?seconds=1"} {
		rec := get(on, p)
		if rec.Code != 200 {
			t.Fatalf("GET %s = %d %q", p, rec.Code, rec.Body.String())
		}
		zr, err := gzip.NewReader(bytes.NewReader(rec.Body.Bytes()))
		if err != nil {
			t.Fatalf("GET %s: not a gzipped profile: %v", p, err)
		}
		if b, err := io.ReadAll(zr); err != nil || len(b) == 0 {
			t.Errorf("GET %s: %d bytes of profile, err %v", p, len(b), err)
		}
	}
	if rec := get(on, "/debug/pprof/goroutine?debug=1"); rec.Code != 200 || !strings.Contains(rec.Body.String(), "goroutine profile:") {
		t.Errorf("goroutine?debug=1: %d %.80q", rec.Code, rec.Body.String())
	}
	for path, code := range map[string]int{
		"/debug/pprof/nope":              404,
		"/debug/pprof/profile?seconds=0": 400,
		"/debug/pprof/profile?seconds=x": 400,
		"/debug/pprof/trace?seconds=301": 400,
	} {
		if rec := get(on, path); rec.Code != code {
			t.Errorf("GET %s = %d, want %d", path, rec.Code, code)
		}
	}
	if rec := get(on, "/debug/pprof/trace?seconds=1"); rec.Code != 200 || !bytes.HasPrefix(rec.Body.Bytes(), []byte("go 1.")) {
		t.Errorf("trace: %d %.20q", rec.Code, rec.Body.Bytes())
	}
}
