//go:build faults

package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-relay/relay"
	relaynats "github.com/go-relay/relay/adapters/nats"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// The NATS JetStream rows. The shared server (127.0.0.1:4222) is never
// restarted: the restart scenario runs on a private nats-server started on
// a free port with its own store directory and killed by the pid of the
// process this test started. Streams the scenarios create on the shared
// server are deleted at cleanup.

const natsServerBin = "/usr/sbin/nats-server"

// natsPrivate is a nats-server with JetStream owned by one test.
type natsPrivate struct {
	t    *testing.T
	port int
	dir  string
	cmd  *exec.Cmd
}

func startNATSPrivate(t *testing.T) *natsPrivate {
	t.Helper()
	if _, err := exec.LookPath(natsServerBin); err != nil {
		if os.Getenv("RELAY_REQUIRE_BROKERS") != "" {
			t.Fatalf("%s is not installed: %v", natsServerBin, err)
		}
		t.Skipf("SKIP: %s is not installed: %v", natsServerBin, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &natsPrivate{t: t, port: ln.Addr().(*net.TCPAddr).Port, dir: t.TempDir()}
	_ = ln.Close()
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *natsPrivate) url() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

func (s *natsPrivate) start() {
	s.t.Helper()
	s.cmd = exec.Command(natsServerBin, "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-sd", s.dir)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("starting nats-server: %v", err)
	}
	waitPort(s.t, "127.0.0.1:"+strconv.Itoa(s.port), true)
}

// stop kills the server with SIGKILL, by pid, and waits for it to exit.
func (s *natsPrivate) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// natsJS connects plain nats.go to server, closed at cleanup.
func natsJS(t *testing.T, server string) jetstream.JetStream {
	t.Helper()
	nc, err := natsgo.Connect(server)
	if err != nil {
		t.Fatalf("connecting to %s: %v", server, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func TestRestartNATS(t *testing.T) {
	srv := startNATSPrivate(t)
	base := srv.url()
	restartScenario(t, "nats", base, testenv.WithParams(base, "group", unique("g"), "inflight", "64"), func(t *testing.T) {
		srv.stop()
		time.Sleep(time.Second) // an outage the clients notice
		srv.start()
	})
}

func TestKillNATS(t *testing.T) {
	base := testenv.NATS(t)
	group := unique("g")
	opts := []string{"group", group, "ack_wait", "2s"}
	withNATSCleanup(t, base, "faults-kill")
	killScenario(t, "nats", base,
		testenv.WithParams(base, append(opts, "inflight", strconv.Itoa(killHold))...),
		testenv.WithParams(base, append(opts, "inflight", "64")...),
		"redelivered by the server after ack_wait=2s")
}

func TestBacklogNATS(t *testing.T) {
	base := testenv.NATS(t)
	withNATSCleanup(t, base, "faults-backlog")
	backlogScenario(t, "nats", base, func(g string, inflight int) string {
		return testenv.WithParams(base, "group", g, "inflight", strconv.Itoa(inflight))
	}, "")
}

// withNATSCleanup deletes, at the end of t, every stream on server that
// holds a topic starting with prefix and that this test created (the scenarios
// pick their topic themselves).
func withNATSCleanup(t *testing.T, server, prefix string) {
	js := natsJS(t, server)
	before := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names := js.StreamNames(ctx)
	for n := range names.Name() {
		before[n] = true
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var drop []string
		names := js.StreamNames(ctx)
		for n := range names.Name() {
			if !before[n] && strings.HasPrefix(n, relaynats.StreamName(prefix)) {
				drop = append(drop, n)
			}
		}
		for _, n := range drop {
			if err := js.DeleteStream(ctx, n); err != nil {
				t.Logf("deleting stream %s: %v", n, err)
			}
		}
	})
}

// natsHostileName is hostileName made sendable: nats.go writes header
// names as they are, so a name with a byte that ends a header line or a
// name (CR, LF, ':', blanks, control bytes, the separators nats-server
// refuses in a name) would corrupt the protocol or be refused by the
// server rather than test the decoder; those bytes are written as %XX. Names the
// adapter reads itself are added, some with values that are not valid
// base64.
func natsHostileName(r *rand.Rand) string {
	if r.IntN(4) == 0 {
		own := []string{relaynats.HeaderKey, relaynats.HeaderKeyB64, relaynats.HeaderIDB64,
			relaynats.MetaPrefix + "x", relaynats.MetaPrefix, relaynats.MetaB64Prefix + "eA", relaynats.MetaB64Prefix + "!!",
			relaynats.MetaB64Prefix, "Status", "Description"}
		return own[r.IntN(len(own))]
	}
	name := []byte(hostileName(r))
	out := make([]byte, 0, len(name))
	for _, c := range name {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"()/,:;<=>?@[\]{}`, c) >= 0 {
			out = append(out, fmt.Sprintf("%%%02X", c)...)
		} else {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return "empty"
	}
	return string(out)
}

// natsHostileValue is random bytes without CR and LF (which would end the
// header line): non-ASCII, NUL, blanks at either end, base64 look-alikes.
func natsHostileValue(r *rand.Rand) string {
	switch r.IntN(4) {
	case 0:
		return ""
	case 1:
		return "  " + strconv.Itoa(r.IntN(100)) + "\t "
	case 2:
		return "eA=="
	default:
		b := randBytes(r, 1+r.IntN(24))
		for i, c := range b {
			if c == '\r' || c == '\n' {
				b[i] = 0
			}
		}
		return string(b)
	}
}

func TestHostileNATS(t *testing.T) {
	base := testenv.NATS(t)
	js := natsJS(t, base)
	withNATSCleanup(t, base, "faults-hostile")
	r := rand.New(rand.NewPCG(7, 8))
	hostileScenario(t, "nats", base, testenv.WithParams(base, "group", unique("g")), func(topic string) []string {
		var keys []string
		for i := 0; i < hostileTotal; i++ {
			body := hostileBody(r, i)
			msg := &natsgo.Msg{Subject: topic, Data: body, Header: natsgo.Header{}}
			for j := 0; j < r.IntN(7); j++ {
				msg.Header.Add(natsHostileName(r), natsHostileValue(r))
			}
			if r.IntN(2) == 0 { // a foreign ID, unique so the server keeps every message
				msg.Header.Set(jetstream.MsgIDHeader, "hostile-"+strconv.Itoa(i)+"-"+natsHostileValue(r))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := js.PublishMsg(ctx, msg)
			cancel()
			if err != nil {
				t.Errorf("publish %d (headers %q): %v", i, msg.Header, err)
				continue
			}
			keys = append(keys, string(body))
		}
		return keys
	}, func(m *relay.Message) string { return string(m.Payload) })
}
