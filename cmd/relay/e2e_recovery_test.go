package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-relay/relay/bridge"
)

// TestStatusShowsRecovery: relay status says when a route recovered from
// its last error, so that an error of the past does not read as live; a
// live error reads as before.
func TestStatusShowsRecovery(t *testing.T) {
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	failedAt, recoveredAt := now.Add(-2*time.Minute), now.Add(-90*time.Second)
	st := bridge.Status{Bridge: "b", Time: now, Started: &failedAt, Routes: []bridge.RouteStatus{
		{Name: "healed", State: bridge.StateRunning, Ready: true,
			LastError: &bridge.ErrorStatus{Message: "publish to \"t\": broker gone", Time: failedAt, RecoveredAt: &recoveredAt}},
		{Name: "broken", State: bridge.StateRetrying,
			LastError: &bridge.ErrorStatus{Message: "open destination: connection refused", Time: now.Add(-3 * time.Second)}},
	}}
	body, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), `"recovered_at":"2026-12-05T09:58:30Z"`) || !strings.Contains(string(body), `"recovered_at":null`) {
		t.Errorf("/routes JSON: %s", body)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	code, stdout, stderr := runRelay(t, nil, "status", "--http", srv.URL)
	if code != 0 {
		t.Fatalf("relay status: exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"healed: recovered 1m30s ago (2026-12-05T09:58:30Z) from last error 2m0s ago (2026-12-05T09:58:00Z): publish to \"t\": broker gone\n",
		"broken: last error 3s ago (2026-12-05T09:59:57Z): open destination: connection refused\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("relay status lacks %q:\n%s", want, stdout)
		}
	}
}
