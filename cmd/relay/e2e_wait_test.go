package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// relay status --wait sees a stop_when: drained route through to its end:
// the bridge keeps answering /routes a moment after its routes drained, so
// that --wait drained and --wait caught-up (a drained route was caught up)
// exit 0 instead of waiting out their timeout; --wait drained on a route
// without stop_when fails at once.
func TestStatusWaitSeesDrain(t *testing.T) {
	const route = `
  - name: %s
    from: {url: "mem://", topic: in, group: g}
    to: {url: "mem://", topic: out}
    caught_up_after: 1s
`
	other := startBridge(t, "routes:"+fmt.Sprintf(route, "forever"))
	code, out, errOut := runRelay(t, nil, "status", "--http", other.addr, "--wait", "drained", "--route", "forever", "--timeout", "30s")
	if code != 1 || !strings.Contains(errOut, "no stop_when: drained") {
		t.Errorf("--wait drained on a route without stop_when: exit %d, %q %q; want 1 at once, saying so", code, out, errOut)
	}

	// One route that drains, so that the bridge exits once it has: both
	// waits run while it does.
	br := startBridge(t, "routes:"+fmt.Sprintf(route, "d")+"    stop_when: drained\n")
	var wg sync.WaitGroup
	for _, want := range []string{"caught-up", "drained"} {
		wg.Go(func() {
			start := time.Now()
			code, out, errOut := runRelay(t, nil, "status", "--http", br.addr, "--wait", want, "--route", "d", "--timeout", "30s")
			if code != 0 || !strings.HasPrefix(out, "route d: ") {
				t.Errorf("--wait %s: exit %d after %v, %q %q; want 0", want, code, time.Since(start).Round(time.Millisecond), out, errOut)
			}
		})
	}
	wg.Wait()
	select {
	case <-br.done:
		if br.code != 0 {
			t.Errorf("bridge exit %d after draining, want 0", br.code)
		}
	case <-time.After(30 * time.Second):
		t.Error("the bridge did not exit after its only route drained")
	}
	if t.Failed() {
		t.Logf("bridge stderr:\n%s", br.err.String())
	}
}
