package kafka_test

import (
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/go-relay/relay/driver/drivertest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// advertisedListener is a listener that reports another address: kfake
// advertises its listener's address to clients, so reporting the fault
// proxy's makes every client connection, not only the bootstrap one, go
// through the proxy.
type advertisedListener struct {
	net.Listener
	addr net.Addr
}

func (l advertisedListener) Addr() net.Addr { return l.addr }

// hungBroker starts a kfake cluster of its own behind a fault proxy, for
// drivertest's HungBrokerClose check. Against a real cluster it skips:
// brokers advertise their own addresses, so clients would bypass a proxy.
func hungBroker(t testing.TB) drivertest.HungBroker {
	if testenv.KafkaBrokers(t) != nil {
		t.Skip("SKIP: a real Kafka cluster advertises its own broker addresses, so clients bypass a local proxy after bootstrapping")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := testenv.NewFaultProxy(t, ln.Addr().String())
	proxyAddr, err := net.ResolveTCPAddr("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	fake, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.GroupMinSessionTimeout(100*time.Millisecond),
		kfake.ListenFn(func(string, string) (net.Listener, error) {
			return advertisedListener{Listener: ln, addr: proxyAddr}, nil
		}),
	)
	if err != nil {
		_ = ln.Close()
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	c := &cluster{brokers: []string{p.Addr()}}
	return drivertest.HungBroker{
		PublisherURL:  c.url(),
		SubscriberURL: func(group string) string { return c.subURL(group) },
		Hang:          p.Hang,
	}
}
