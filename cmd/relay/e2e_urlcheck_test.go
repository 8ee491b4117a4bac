package main

import (
	"strings"
	"testing"
)

// TestMistypedURLParameter: relay validate and relay bridge both refuse a
// config whose endpoint URL has a parameter its adapter does not know,
// naming the field, the route and the parameter, exit 3 (relay bridge
// without connecting or retrying) and never print the password.
func TestMistypedURLParameter(t *testing.T) {
	file := writeFile(t, "typo.yaml", `routes:
  - name: orders
    from: {url: 'amqp://app:${RABBIT_PASSWORD}@127.0.0.1:1/?group=g', topic: orders}
    to: {url: 'redis://127.0.0.1:1/0?confrim=true'}
`)
	want := []string{
		file + `:4:15: routes[0].to.url: route "orders": parameter "confrim": unknown parameter`,
		"relay: " + file + ": 1 problem(s)",
	}
	env := []string{"RABBIT_PASSWORD=hunter2"}
	for _, cmd := range [][]string{{"validate", "-c", file}, {"bridge", "-c", file}} {
		code, stdout, stderr := runRelayEnv(t, env, nil, cmd...)
		if code != 3 {
			t.Errorf("relay %s: exit %d, want 3; stderr:\n%s", cmd[0], code, stderr)
		}
		if got := strings.TrimSpace(stderr); got != strings.Join(want, "\n") {
			t.Errorf("relay %s printed:\n%s\nwant:\n%s", cmd[0], got, strings.Join(want, "\n"))
		}
		if strings.Contains(stdout+stderr, "hunter2") {
			t.Errorf("relay %s leaked the password", cmd[0])
		}
	}
}
