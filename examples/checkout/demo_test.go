package main

import (
	"net/url"
	"os/exec"
	"strings"
	"testing"

	"github.com/go-relay/relay/internal/testkit/testenv"
)

// TestMakeDemoPrintsNoPassword runs `make demo BROKER=...` as the README
// says, on the local RabbitMQ and on an unreachable one, and checks that
// the password of the URL appears nowhere in what it prints.
func TestMakeDemoPrintsNoPassword(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("make is needed to test the demo target:", err)
	}
	testenv.HoldBroker(t, "amqp")
	rabbit := testenv.AMQP(t)
	u, err := url.Parse(rabbit)
	if err != nil {
		t.Fatal(err)
	}
	pw, ok := u.User.Password()
	if !ok || pw == "" {
		t.Fatalf("%s has no password to hide", rabbit)
	}
	for _, c := range []struct {
		broker, password string
		ok               bool
	}{
		{rabbit, pw, true},
		{"amqp://guest:s3cr3t-demo@127.0.0.1:1/?connect_timeout=1s", "s3cr3t-demo", false},
	} {
		cmd := exec.Command("make", "-C", "../..", "demo", "BROKER="+c.broker)
		out, err := cmd.CombinedOutput()
		if (err == nil) != c.ok {
			t.Errorf("make demo BROKER=%s: %v, want success %v:\n%s", c.broker, err, c.ok, out)
		}
		if c.ok && !strings.Contains(string(out), "checkout demo on amqp://") {
			t.Errorf("make demo: unexpected output:\n%s", out)
		}
		// The local password is "guest" like the user name, so look for
		// it where a URL has it; the made-up one must not appear at all.
		if strings.Contains(string(out), ":"+c.password+"@") || (!c.ok && strings.Contains(string(out), c.password)) {
			t.Errorf("make demo BROKER=…%s…: printed the password:\n%s", c.password, out)
		}
	}
}
