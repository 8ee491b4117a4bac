package nats_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// privateServer is a nats-server with JetStream that the test starts on a
// free port with its own store directory, so that restarting it disturbs
// no other test. It is killed at cleanup.
type privateServer struct {
	t    testing.TB
	port int
	dir  string
	args []string // more nats-server flags (auth, TLS)
	cmd  *exec.Cmd
}

const natsServerBin = "/usr/sbin/nats-server"

func startPrivateServer(t testing.TB, args ...string) *privateServer {
	t.Helper()
	if _, err := exec.LookPath(natsServerBin); err != nil {
		if testenv.Required() {
			t.Fatalf("%s is not installed (Debian: apt-get install nats-server): %v", natsServerBin, err)
		}
		t.Skipf("SKIP: %s is not installed: %v", natsServerBin, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	s := &privateServer{t: t, port: port, dir: t.TempDir(), args: args}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *privateServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

func (s *privateServer) up() bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

func (s *privateServer) start() {
	s.t.Helper()
	s.cmd = exec.Command(natsServerBin, append([]string{"-a", "127.0.0.1", "-p", fmt.Sprint(s.port), "-js", "-sd", s.dir}, s.args...)...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("starting nats-server: %v", err)
	}
	for i := 0; i < 200 && !s.up(); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if !s.up() {
		s.t.Fatalf("nats-server does not listen on port %d", s.port)
	}
}

// stop kills the server (SIGKILL, by the pid of the process this test
// started) and waits for it to exit.
func (s *privateServer) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// After the server is killed and started again (same store), a Publish
// started during the outage succeeds once it is back, the publisher
// reports unhealthy meanwhile, and the running subscription receives
// everything published since, without being restarted.
func TestServerRestart(t *testing.T) {
	srv := startPrivateServer(t)
	ctx := context.Background()
	pub, err := relay.OpenPublisher(ctx, srv.url())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := relay.OpenSubscriber(ctx, srv.url()+"?group=g")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	topic := "restart.test"
	if err := sub.(relay.Provisioner).Provision(ctx, topic); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := sub.Subscribe(sctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	before := relay.NewMessage([]byte("before"))
	if err := pub.Publish(ctx, topic, before); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, ch, 1)[0]; got.ID != before.ID {
		t.Fatalf("got %q, want %q", got.ID, before.ID)
	}

	srv.stop()
	hc := pub.(relay.HealthChecker)
	deadline := time.Now().Add(10 * time.Second)
	for hc.Health() == nil {
		if time.Now().After(deadline) {
			t.Fatal("publisher still healthy 10s after the server was killed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("publisher health while the server is down: %v", hc.Health())
	during := relay.NewMessage([]byte("during"))
	published := make(chan error, 1)
	go func() {
		pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		published <- pub.Publish(pctx, topic, during)
	}()
	time.Sleep(500 * time.Millisecond) // let the Publish start while the server is down
	srv.start()
	if err := <-published; err != nil {
		t.Fatalf("Publish started during the outage: %v", err)
	}
	after := relay.NewMessage([]byte("after"))
	if err := pub.Publish(ctx, topic, after); err != nil {
		t.Fatalf("Publish after the restart: %v", err)
	}
	// "before" may come again: its ack is sent in the background and the
	// server was killed right after it, so the ack may not have reached
	// the server's store (at-least-once allows that redelivery, nothing
	// else).
	seen := map[string]bool{}
	again := 0
	for !seen[during.ID] || !seen[after.ID] {
		m := receive(t, ch, 1)[0]
		switch m.ID {
		case during.ID, after.ID:
			if seen[m.ID] {
				t.Fatalf("after the restart %q (%s) arrived twice", m.ID, m.Payload)
			}
			seen[m.ID] = true
		case before.ID:
			if again++; again > 1 {
				t.Fatalf("after the restart %q (before) arrived %d times", m.ID, again)
			}
			t.Logf("the message received before the outage came again: its ack had not reached the server")
		default:
			t.Fatalf("after the restart got %q (%s), want %q and %q", m.ID, m.Payload, during.ID, after.ID)
		}
	}
	if err := hc.Health(); err != nil {
		t.Errorf("publisher unhealthy after the restart: %v", err)
	}
	if err := sub.Close(); err != nil && !errors.Is(err, relay.ErrClosed) {
		t.Errorf("Subscriber.Close: %v", err)
	}
}

// TestConformancePrivateServer runs the suite against a server of its
// own, so that its Reconnect check can restart the server (TestConformance
// uses the shared one, which tests must not restart).
func TestConformancePrivateServer(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: -short: TestConformance covers everything but Reconnect")
	}
	srv := startPrivateServer(t)
	h := harnessFor(t, srv.url())
	h.Restart = func(testing.TB) { srv.stop(); srv.start() }
	drivertest.Run(t, h)
}

// A Publish during an outage larger than nats.go's reconnect buffer (8
// MiB) does not fail: what did not fit is sent again once the server is
// back.
func TestPublishBeyondReconnectBuffer(t *testing.T) {
	srv := startPrivateServer(t)
	ctx := context.Background()
	pub, err := relay.OpenPublisher(ctx, srv.url())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	topic := "outage.big"
	if err := pub.Publish(ctx, topic, relay.NewMessage([]byte("create the stream"))); err != nil {
		t.Fatal(err)
	}
	srv.stop()
	hc := pub.(relay.HealthChecker)
	for hc.Health() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	msgs := make([]*relay.Message, 12)
	for i := range msgs {
		msgs[i] = relay.NewMessage(make([]byte, 900<<10))
	}
	published := make(chan error, 1)
	go func() {
		pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		published <- pub.Publish(pctx, topic, msgs...)
	}()
	time.Sleep(500 * time.Millisecond) // let the Publish fill the buffer while the server is down
	srv.start()
	if err := <-published; err != nil {
		t.Fatalf("Publish of 10.8 MB during the outage: %v", err)
	}
}
