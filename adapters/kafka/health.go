package kafka

import (
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// health follows the outcome of every connection attempt and request of
// the clients it is hooked into. It is healthy while at least one broker
// answered its latest request (or before any attempt). Safe for concurrent
// use; it never blocks on the network.
type health struct {
	mu     sync.Mutex
	broker map[int32]error // node ID -> error of its latest connect or request (nil = ok)
}

var (
	_ kgo.HookBrokerConnect = (*health)(nil)
	_ kgo.HookBrokerE2E     = (*health)(nil)
)

func newHealth() *health { return &health{broker: map[int32]error{}} }

func (h *health) set(node int32, err error) {
	h.mu.Lock()
	h.broker[node] = err
	h.mu.Unlock()
}

func (h *health) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		h.set(meta.NodeID, err)
	}
}

func (h *health) OnBrokerE2E(meta kgo.BrokerMetadata, _ int16, e2e kgo.BrokerE2E) {
	h.set(meta.NodeID, e2e.Err())
}

// err returns nil when some broker works, otherwise why none does. Seed
// brokers (negative node IDs) are the same servers as the brokers the
// cluster metadata names, so they count only until a real broker was seen.
func (h *health) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	real := false
	for node := range h.broker {
		if node >= 0 {
			real = true
			break
		}
	}
	var last error
	for node, err := range h.broker {
		if real && node < 0 {
			continue
		}
		if err == nil {
			return nil
		}
		last = err
	}
	if last == nil {
		return nil
	}
	return fmt.Errorf("relay/kafka: no broker reachable: %w", last)
}
