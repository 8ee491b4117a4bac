//go:build faults

package reqreply_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/testenv"
	"github.com/go-relay/relay/reqreply"
	"github.com/go-relay/relay/router"
)

func init() { childMain = runServerChild }

// runServerChild serves RELAY_REQREPLY_TOPIC with the subscriber URL
// RELAY_REQREPLY_SUB_URL and the publisher URL RELAY_REQREPLY_PUB_URL. It
// prints "READY" once it serves and "HANDLING <payload>" for every request
// it handles; a request whose payload starts with "hang" is never answered.
// It runs until it is killed.
func runServerChild() int {
	ctx := context.Background()
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "child:", err); return 1 }
	pub, err := relay.OpenPublisher(ctx, os.Getenv("RELAY_REQREPLY_PUB_URL"))
	if err != nil {
		return fail(err)
	}
	sub, err := relay.OpenSubscriber(ctx, os.Getenv("RELAY_REQREPLY_SUB_URL"))
	if err != nil {
		return fail(err)
	}
	r, err := router.New(router.Config{RedeliveryDelay: func(*relay.Message, error) time.Duration { return 10 * time.Millisecond }})
	if err != nil {
		return fail(err)
	}
	h := reqreply.Handler(pub, func(ctx context.Context, req *relay.Message) (*relay.Message, error) {
		fmt.Printf("HANDLING %s\n", req.Payload)
		if strings.HasPrefix(string(req.Payload), "hang") {
			select {} // the process dies here
		}
		return relay.NewMessage(append([]byte("answer to "), req.Payload...)), nil
	})
	if err := r.AddHandler("server", sub, os.Getenv("RELAY_REQREPLY_TOPIC"), h, router.WithConcurrency(4)); err != nil {
		return fail(err)
	}
	go func() {
		<-r.Running()
		fmt.Println("READY")
	}()
	if err := r.Run(ctx); err != nil {
		return fail(err)
	}
	return 0
}

// serverChild is a running child process and the lines it prints.
type serverChild struct {
	cmd   *exec.Cmd
	lines chan string
}

func startServer(t *testing.T, env ...string) *serverChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{childEnv + "=1"}, env...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &serverChild{cmd: cmd, lines: make(chan string, 64)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return c
}

// waitFor reads the child's lines until want, failing after 60 s.
func (c *serverChild) waitFor(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("child exited before printing %q", want)
			}
			if l == want {
				return
			}
		case <-timeout:
			t.Fatalf("child did not print %q within 60s", want)
		}
	}
}

// killServerScenario: the serving process is SIGKILLed while it handles a
// request. The requester gets context.DeadlineExceeded (not a hang); a
// request retried after a new server started is answered by it, and the
// new server skips the killed request (its deadline passed) instead of
// handling it again.
func killServerScenario(t *testing.T, base string) {
	topic := "rr-kill-" + relay.NewID()[24:]
	srvURL := testenv.WithParams(base, "group", "server")
	ctx := context.Background()
	srvSub, err := relay.OpenSubscriber(ctx, srvURL)
	if err != nil {
		t.Fatal(err)
	}
	if err := srvSub.(relay.Provisioner).Provision(ctx, topic); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srvSub.(reqreply.TopicRemover).RemoveTopic(ctx, topic); err != nil {
			t.Errorf("removing %s: %v", topic, err)
		}
		_ = srvSub.Close()
	}()
	env := []string{"RELAY_REQREPLY_TOPIC=" + topic, "RELAY_REQREPLY_SUB_URL=" + srvURL, "RELAY_REQREPLY_PUB_URL=" + base}

	pub, err := relay.OpenPublisher(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := relay.OpenSubscriber(ctx, testenv.WithParams(base, "group", "requester"))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	r, err := reqreply.NewRequester(ctx, pub, sub)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	first := startServer(t, env...)
	first.waitFor(t, "READY")
	errc := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := r.Request(rctx, topic, relay.NewMessage([]byte("hang 1")))
		errc <- err
	}()
	first.waitFor(t, "HANDLING hang 1")
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.cmd.Wait()
	select {
	case err := <-errc:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("request to the killed server = %v, want context.DeadlineExceeded", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("request to the killed server still waiting 60s after its 5s deadline")
	}
	if st := r.Stats(); st.InFlight != 0 || st.TimedOut != 1 {
		t.Errorf("Stats after the timeout %+v, want InFlight=0 TimedOut=1", st)
	}

	second := startServer(t, env...)
	second.waitFor(t, "READY")
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rep, err := r.Request(rctx, topic, relay.NewMessage([]byte("retry 1")))
	if err != nil {
		t.Fatalf("retried request: %v", err)
	}
	if string(rep.Payload) != "answer to retry 1" {
		t.Errorf("retried request's reply %q, want %q", rep.Payload, "answer to retry 1")
	}
	// The killed request may come back to the new server (at least
	// once); its deadline has passed, so the server must not handle it.
	_ = second.cmd.Process.Signal(syscall.SIGKILL)
	_ = second.cmd.Wait()
	for l := range second.lines {
		if l == "HANDLING hang 1" {
			t.Errorf("the restarted server handled the killed request after its deadline")
		}
	}
	t.Logf("killed server: timeout after the deadline; retry answered by the restarted server; stats %+v", r.Stats())
}

func TestKillServerRedis(t *testing.T) { killServerScenario(t, testenv.Redis(t)) }

func TestKillServerRabbitMQ(t *testing.T) { killServerScenario(t, testenv.AMQP(t)) }
