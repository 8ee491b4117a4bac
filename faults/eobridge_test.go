//go:build faults

package faults

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/go-relay/relay/bridge"
)

// eoBridgeConfig is the bridge configuration of the eo-bridge child: one
// kafka -> kafka route with the guarantee of RELAY_FAULTS_GUARANTEE and
// the route's defaults otherwise. Parse expands the ${...} from the
// child's environment (set by killForwarderKafka).
const eoBridgeConfig = `http: {disabled: true}
routes:
  - name: eo
    from: {url: "${RELAY_FAULTS_URL}", topic: "${RELAY_FAULTS_TOPIC}"}
    to: {url: "${RELAY_FAULTS_DST}", topic: "${RELAY_FAULTS_OUT}"}
    guarantee: ${RELAY_FAULTS_GUARANTEE}
`

// runEOBridgeChild runs a bridge with eoBridgeConfig until it is killed
// or gets SIGTERM (then it drains).
func runEOBridgeChild() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "child:", err); return 1 }
	cfg, err := bridge.Parse([]byte(eoBridgeConfig), "eo-bridge.yaml", os.LookupEnv)
	if err != nil {
		return fail(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b, err := bridge.New(*cfg, bridge.Options{Logger: log})
	if err != nil {
		return fail(err)
	}
	if err := b.Run(ctx); err != nil {
		return fail(err)
	}
	return 0
}

// TestKillExactlyOnceBridgeKafka: a bridge process with one kafka ->
// kafka route, `guarantee: exactly-once` in its YAML, is killed with
// SIGKILL twice while it forwards a backlog and restarted with the same
// transactional_id (killForwarderKafka): a read_committed reader of the
// destination receives every ID exactly once. The same run with
// `guarantee: at-least-once` (no transactional_id) is the control: it
// must lose nothing, and its duplicates (the copies forwarded by the
// killed bridges whose source offsets were not committed yet) are
// recorded, not asserted.
func TestKillExactlyOnceBridgeKafka(t *testing.T) {
	for _, g := range []string{"exactly-once", "at-least-once"} {
		t.Run(g, func(t *testing.T) {
			start := time.Now()
			eo := g == "exactly-once"
			l, kills := killForwarderKafka(t, "eo-bridge", eo, "RELAY_FAULTS_GUARANTEE="+g)
			note := fmt.Sprintf("bridge route kafka->kafka, guarantee: %s, read_committed reader; killed at %v of %d forwarded", g, kills, killForwardTotal)
			if eo {
				note += ", restarted with the same transactional_id"
			} else {
				note += " (control: duplicates allowed)"
			}
			r := l.result(t, "bridge "+g+" SIGKILL x2", "kafka (kfake)", note)
			record(t, r, start)
			if eo && r.Dups != 0 {
				t.Errorf("%d duplicates seen by the read_committed reader; want 0", r.Dups)
			}
			if !eo {
				t.Logf("at-least-once control: %d duplicates after two SIGKILLs", r.Dups)
			}
		})
	}
}
