package sqlite_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// childEnv makes the test binary a consumer process (see runChild).
const childEnv = "RELAY_SQLITE_CHILD"

// runChild subscribes to RELAY_SQLITE_TOPIC with the subscriber URL
// RELAY_SQLITE_URL, prints "READY" once subscribed and "ACK id" for each
// message it acked, and ends when its stdin closes.
func runChild() int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub, err := relay.OpenSubscriber(ctx, os.Getenv("RELAY_SQLITE_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	defer sub.Close()
	ch, err := sub.Subscribe(ctx, os.Getenv("RELAY_SQLITE_TOPIC"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	fmt.Println("READY")
	for m := range ch {
		time.Sleep(20 * time.Millisecond) // work that takes longer than a claim under -race, so that both processes pull
		if err := m.Ack(); err != nil {
			fmt.Fprintln(os.Stderr, "child: ack:", err)
			continue
		}
		fmt.Println("ACK", m.ID)
	}
	return 0
}

// TestCompetingProcesses: two processes consume one group of one file;
// every message is acked once, by one of them, and both take a share
// (BEGIN IMMEDIATE claims: two processes never lease one row).
func TestCompetingProcesses(t *testing.T) {
	ctx := context.Background()
	base := dbURL(t)
	topic := relaytest.Unique("procs")
	sub := openSub(t, base, "workers")
	relaytest.Provision(t, sub.(relay.Provisioner), topic)
	_ = sub.Close()

	var mu sync.Mutex
	acked := map[string][]int{} // ID -> the children that acked it
	all := make(chan struct{})
	const n = 100
	var wg sync.WaitGroup
	var stdins []io.WriteCloser
	for i := range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=1", "RELAY_SQLITE_TOPIC="+topic,
			"RELAY_SQLITE_URL="+testenv.WithParams(base, "group", "workers", "inflight", "4", "poll", "20ms"))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		stdins = append(stdins, in)
		ready := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				line := sc.Text()
				if line == "READY" {
					close(ready)
					continue
				}
				if id, ok := strings.CutPrefix(line, "ACK "); ok {
					mu.Lock()
					acked[id] = append(acked[id], i)
					if len(acked) == n {
						close(all)
					}
					mu.Unlock()
				}
			}
			_ = cmd.Wait()
		}()
		select {
		case <-ready:
		case <-time.After(30 * time.Second):
			t.Fatalf("child %d did not subscribe within 30s", i)
		}
	}
	defer func() {
		for _, in := range stdins {
			_ = in.Close()
		}
		wg.Wait()
	}()

	msgs := make([]*relay.Message, n)
	for i := range msgs {
		msgs[i] = relay.NewMessage([]byte(fmt.Sprintf("job %d", i)))
	}
	if err := openPub(t, base).Publish(ctx, topic, msgs...); err != nil {
		t.Fatal(err)
	}
	select {
	case <-all:
	case <-time.After(60 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%d of %d messages acked within 60s", len(acked), n)
	}
	for _, in := range stdins {
		_ = in.Close()
	}
	wg.Wait()
	per := [2]int{}
	for _, m := range msgs {
		by := acked[m.ID]
		if len(by) != 1 {
			t.Errorf("message %s acked %d times (by %v), want once", m.ID, len(by), by)
			continue
		}
		per[by[0]]++
	}
	if per[0] == 0 || per[1] == 0 {
		t.Errorf("one process took everything: %v", per)
	}
	t.Logf("%d messages: %d acked by one process, %d by the other", n, per[0], per[1])
}
