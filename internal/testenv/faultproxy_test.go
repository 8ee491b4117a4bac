package testenv_test

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/go-relay/relay/internal/testenv"
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
