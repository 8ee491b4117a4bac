package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// argsEnv makes the test binary run main with the arguments it holds
// (separated by newlines) instead of the tests; see TestMain.
const argsEnv = "RELAY_CHECKOUT_ARGS"

// TestCheckoutOnSQLite runs the demo on a database file, as
// `make demo BROKER=sqlite://./checkout.db` does.
func TestCheckoutOnSQLite(t *testing.T) {
	checkRun(t, "sqlite://"+filepath.Join(t.TempDir(), "checkout.db"), false, nil)
}

// TestCheckoutOnSQLiteSurvivesSIGKILL: a process provisions the groups and
// publishes the whole story to a database file, and is killed with SIGKILL
// before anyone consumed anything (no Close, no checkpoint: the WAL is as
// the kill left it). A second process on the same file consumes the run:
// every message is received and acked by everyone who should get it.
func TestCheckoutOnSQLiteSurvivesSIGKILL(t *testing.T) {
	broker := "sqlite://" + filepath.Join(t.TempDir(), "checkout.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), argsEnv+"="+strings.Join([]string{"-broker", broker, "-run", "killed", "-stage", "publish", "-timeout", "2m"}, "\n"))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	published := make(chan struct{})
	var out bytes.Buffer
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			if strings.HasPrefix(sc.Text(), "published run killed") {
				close(published)
			}
		}
	}()
	select {
	case <-published:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the publish stage did not publish within 60s:\n%s", out.String())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("the publish stage ended with %v, want killed by SIGKILL", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got bytes.Buffer
	rep, err := run(ctx, &got, broker, Options{Run: "killed", Stage: "consume"})
	if err != nil {
		t.Fatalf("consume stage: %v\n%s", err, got.String())
	}
	if strings.Contains(got.String(), "order service: placing") {
		t.Fatalf("the consume stage published again:\n%s", got.String())
	}
	for _, s := range services {
		if rep.Acked[s.group] != len(orders) {
			t.Errorf("group %s acked %d orders after the kill, want %d", s.group, rep.Acked[s.group], len(orders))
		}
	}
	for g, want := range map[string]int{"resizers": resizeJobs, "payments": len(orders), "duplicates": 1, "poison": len(services)} {
		if rep.Acked[g] != want {
			t.Errorf("%s: %d after the kill, want %d", g, rep.Acked[g], want)
		}
	}
	t.Logf("published by the killed process, consumed by the next one:\n%s", got.String())
}
