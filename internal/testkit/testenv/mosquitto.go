package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// MosquittoBin is the broker the MQTT tests start privately.
const MosquittoBin = "/usr/sbin/mosquitto"

// Mosquitto is a mosquitto that a test starts on a free port with a
// configuration, persistence and log of its own, so that stopping it
// disturbs no other test (the shared one on 1883 is never restarted). It
// is stopped at cleanup.
type Mosquitto struct {
	t    testing.TB
	port int
	conf string
	log  string
	cmd  *exec.Cmd
}

// StartMosquitto starts mosquitto with persistence (saved every second),
// TCP_NODELAY and the configuration lines extra; it fails (CI) or skips the test when
// mosquitto is not installed.
func StartMosquitto(t testing.TB, extra ...string) *Mosquitto {
	t.Helper()
	if _, err := exec.LookPath(MosquittoBin); err != nil {
		if Required() {
			t.Fatalf("%s is not installed (Debian: apt-get install mosquitto): %v", MosquittoBin, err)
		}
		t.Skipf("SKIP: %s is not installed: %v", MosquittoBin, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	// mosquitto started as root runs as user mosquitto, which must reach
	// and write its files: a directory of its own in the temporary
	// directory (t.TempDir's parents are private).
	dir, err := os.MkdirTemp("", "relay-mosquitto-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	m := &Mosquitto{t: t, port: port, conf: filepath.Join(dir, "mosquitto.conf"), log: filepath.Join(dir, "mosquitto.log")}
	lines := append([]string{
		fmt.Sprintf("listener %d 127.0.0.1", port),
		"allow_anonymous true",
		"persistence true",
		"persistence_location " + dir + "/",
		"autosave_interval 1",
		"log_dest file " + m.log,
		"log_type subscribe",
		"log_type notice",
		// docs/mqtt.md asks for it: without it, the last PUBACKs of a
		// burst wait for the client's delayed TCP ack (Nagle), 40 ms.
		"set_tcp_nodelay true",
	}, extra...)
	if err := os.WriteFile(m.conf, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m.Start()
	t.Cleanup(m.Stop)
	return m
}

// URL is the broker's mqtt:// URL.
func (m *Mosquitto) URL() string { return fmt.Sprintf("mqtt://127.0.0.1:%d", m.port) }

func (m *Mosquitto) up() bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", m.port), time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// Start starts the broker and returns once it listens.
func (m *Mosquitto) Start() {
	m.t.Helper()
	m.cmd = exec.Command(MosquittoBin, "-c", m.conf)
	if err := m.cmd.Start(); err != nil {
		m.t.Fatalf("starting mosquitto: %v", err)
	}
	for i := 0; i < 200 && !m.up(); i++ {
		time.Sleep(25 * time.Millisecond)
	}
	if !m.up() {
		m.t.Fatalf("mosquitto does not listen on port %d", m.port)
	}
}

// Stop ends the broker as a service stop does: SIGTERM, on which
// mosquitto saves its persistence file (sessions and queued messages);
// SIGKILL when it has not exited after 5s. Idempotent.
func (m *Mosquitto) Stop() {
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = m.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = m.cmd.Process.Kill()
		<-done
	}
	m.cmd = nil
}

// Restart stops the broker (unless it is stopped), starts it, and returns
// once want shared subscriptions ($share/...) were made since: mosquitto
// 2.0.11 does not restore shared subscriptions from its persistence file,
// so a group's messages are dropped until a member subscribes again.
func (m *Mosquitto) Restart(want int) {
	m.t.Helper()
	m.Stop()
	before, _ := os.ReadFile(m.log)
	m.Start()
	m.WaitSubscribed(len(before), want)
}

// LogSize is the size of the broker's log, for WaitSubscribed.
func (m *Mosquitto) LogSize() int {
	b, _ := os.ReadFile(m.log)
	return len(b)
}

// WaitSubscribed waits until the broker's log has recorded want shared
// subscriptions beyond its first from bytes, failing the test after 20s.
func (m *Mosquitto) WaitSubscribed(from, want int) {
	m.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		now, _ := os.ReadFile(m.log)
		if len(now) >= from && strings.Count(string(now[from:]), " $share/") >= want {
			return
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("mosquitto: %d shared subscriptions within 20s; log:\n%s", want, now)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
