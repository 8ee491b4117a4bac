package testenv

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// goawsMapWriters are the calls that add or remove a topic or queue (or a
// topic's subscription) in goaws's global maps.
var goawsMapWriters = []string{"CreateQueue", "DeleteQueue", "CreateTopic", "DeleteTopic", "Subscribe", "Unsubscribe"}

// GoawsGuard starts, for the rest of the test, an HTTP proxy in front of
// the SQS/SNS emulator at endpoint and returns its URL. The proxy runs the
// calls that create or delete a topic, a queue or a subscription alone,
// and every other call under a shared lock for its whole length. goaws
// v0.5.4 reads its topic and queue maps without its lock in most calls
// while those calls write them, and the Go runtime ends the emulator
// ("fatal error: concurrent map read and map write") when the two meet:
// a suite that creates topics while others are busy (Watermill's) kills
// it now and then, more often on a loaded machine. Long polls hold the
// shared lock, so use a short wait= (1s) behind the guard.
func GoawsGuard(t testing.TB, endpoint string) string {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatalf("testenv: GoawsGuard(%q): %v", endpoint, err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var mu sync.RWMutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if goawsWritesMaps(r.Header.Get("X-Amz-Target"), body) {
			mu.Lock()
			defer mu.Unlock()
		} else {
			mu.RLock()
			defer mu.RUnlock()
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// goawsWritesMaps reports whether a call, by its X-Amz-Target header (the
// JSON protocol of SQS: "AmazonSQS.CreateQueue") or its form body (the
// query protocol of SNS: "Action=CreateTopic&..."), is one of
// goawsMapWriters.
func goawsWritesMaps(target string, body []byte) bool {
	action := ""
	if _, a, ok := strings.Cut(target, "."); ok {
		action = a
	} else if q, err := url.ParseQuery(string(body)); err == nil {
		action = q.Get("Action")
	}
	for _, w := range goawsMapWriters {
		if action == w {
			return true
		}
	}
	return false
}
