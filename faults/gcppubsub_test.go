//go:build faults

package faults

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/go-relay/relay/adapters/gcppubsub"
	"github.com/go-relay/relay/internal/testkit/pubsubfake"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// The Google Cloud Pub/Sub rows run on pstest, the client library's fake
// server. The SIGKILL and backlog rows run it as a process of its own
// (internal/cmd/pstestserver, built once per test binary), so that the
// killed or measured consumer is not the server; the restart row serves
// it in this process and restarts its listener (every connection cut,
// new ones refused for a second) with its state kept, as the service
// keeps messages through an outage. Subscriptions use an ack deadline of
// 2 s, which pstest allows (the service takes 10 s or more).

// startPstestServer starts pstestserver (built once per test binary) on a
// free port, stopped (SIGKILL, by pid) when t ends, and returns the base
// URL of a project on it.
func startPstestServer(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(pstestBin.get(t), "-port", "0")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting pstestserver: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "pstestserver: listening on "); ok {
				line <- addr
			}
		}
	}()
	select {
	case addr := <-line:
		return "gcppubsub://relay-faults?emulator=" + addr
	case <-time.After(30 * time.Second):
		t.Fatal("pstestserver did not report its address within 30s")
	}
	return ""
}

func TestKillGCPPubSub(t *testing.T) {
	base := startPstestServer(t)
	opts := []string{"group", unique("g"), "ack_deadline", "2s"}
	killScenario(t, "gcppubsub (pstest)", base,
		testenv.WithParams(base, append(opts, "inflight", strconv.Itoa(killHold))...),
		testenv.WithParams(base, append(opts, "inflight", "64")...),
		"redelivered by the server after the ack deadline (2s)")
}

func TestRestartGCPPubSub(t *testing.T) {
	srv, err := pubsubfake.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	base := "gcppubsub://relay-faults?emulator=" + srv.Addr
	restartScenario(t, "gcppubsub (pstest)", base, testenv.WithParams(base, "group", unique("g"), "inflight", "64", "ack_deadline", "2s"), func(t *testing.T) {
		if err := srv.Restart(time.Second); err != nil {
			t.Fatalf("restarting the fake: %v", err)
		}
	})
}

func TestBacklogGCPPubSub(t *testing.T) {
	base := startPstestServer(t)
	backlogScenario(t, "gcppubsub (pstest)", base, func(g string, inflight int) string {
		return testenv.WithParams(base, "group", g, "inflight", strconv.Itoa(inflight))
	}, "")
}
