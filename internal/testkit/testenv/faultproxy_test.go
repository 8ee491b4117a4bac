package testenv_test

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/go-relay/relay/internal/testkit/testenv"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

func roundTrip(c net.Conn, r *bufio.Reader, timeout time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	_, err := r.ReadString('\n')
	return err
}

func TestFaultProxyHangAndRestore(t *testing.T) {
	p := testenv.NewFaultProxy(t, echoServer(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if err := roundTrip(c, r, 2*time.Second); err != nil {
		t.Fatalf("before the fault: %v", err)
	}
	p.Hang()
	err = roundTrip(c, r, 300*time.Millisecond)
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("while hung: want a timeout (no answer, no reset), got %v", err)
	}
	p.Restore()
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := roundTrip(c2, bufio.NewReader(c2), 2*time.Second); err != nil {
		t.Fatalf("after Restore, a new connection: %v", err)
	}
}

func dialProxy(t *testing.T, p *testenv.FaultProxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func TestFaultProxyLatency(t *testing.T) {
	p := testenv.NewFaultProxy(t, echoServer(t))
	p.Latency(100*time.Millisecond, 0)
	c, r := dialProxy(t, p)
	start := time.Now()
	if err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// Each direction waits at least the latency: a lower bound, not a
	// timing threshold a slow machine could miss.
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("round trip took %v through 100 ms of latency each way", d)
	}
}

func TestFaultProxyResetPeer(t *testing.T) {
	p := testenv.NewFaultProxy(t, echoServer(t))
	c, r := dialProxy(t, p)
	if err := roundTrip(c, r, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.ResetPeer(0)
	err := roundTrip(c, r, 2*time.Second)
	if ne, ok := err.(net.Error); err == nil || ok && ne.Timeout() {
		t.Fatalf("after ResetPeer: want the connection closed, got %v", err)
	}
	p.Restore()
	c2, r2 := dialProxy(t, p)
	if err := roundTrip(c2, r2, 2*time.Second); err != nil {
		t.Fatalf("after Restore, a new connection: %v", err)
	}
}

func TestFaultProxyCut(t *testing.T) {
	p := testenv.NewFaultProxy(t, echoServer(t))
	c, r := dialProxy(t, p)
	if err := roundTrip(c, r, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	if err := roundTrip(c, r, 2*time.Second); err == nil {
		t.Fatal("after Cut: an existing connection still answers")
	}
	if c2, err := net.Dial("tcp", p.Addr()); err == nil {
		c2.Close()
		t.Fatal("after Cut: a new connection was accepted")
	}
	p.Uncut()
	c3, r3 := dialProxy(t, p)
	if err := roundTrip(c3, r3, 2*time.Second); err != nil {
		t.Fatalf("after Uncut, a new connection: %v", err)
	}
}

func TestFaultProxySlowClose(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() { // a server that writes one line and closes
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("bye\n"))
			c.Close()
		}
	}()
	p := testenv.NewFaultProxy(t, l.Addr().String())
	p.SlowClose(300 * time.Millisecond)
	c, r := dialProxy(t, p)
	if line, err := r.ReadString('\n'); err != nil || line != "bye\n" {
		t.Fatalf("first line: %q, %v", line, err)
	}
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("read more than the server wrote")
	}
	// The close is held back at least the delay: a lower bound.
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("the close arrived after %v, through a 300ms slow close", d)
	}
}
