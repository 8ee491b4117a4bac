// Command kfakeserver runs franz-go's kfake (a Kafka wire-protocol cluster
// written in Go, held in memory) as a process of its own, so that relay's
// Kafka tests and benchmarks can run against a broker outside the test
// process, as a real one would be:
//
//	go run ./internal/cmd/kfakeserver -port 9092 &
//	RELAY_TEST_KAFKA_BROKERS=127.0.0.1:9092 go test -run '^$' -bench 'Ratio/consume-ack' ./adapters/kafka
//
// The cluster has the settings the Kafka adapter's in-process tests give
// theirs (internal/testkit/kfakeopts), with brokers on consecutive ports of
// 127.0.0.1 from -port and topics created with -partitions partitions. It
// runs until SIGINT or SIGTERM; nothing is kept on disk.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/go-relay/relay/internal/testkit/kfakeopts"
	"github.com/go-relay/relay/internal/testkit/servercmd"
)

func main() { servercmd.Main("kfakeserver", run) }

// run parses args (usage text goes to errOut), starts the cluster, prints
// its addresses to out, and closes the cluster once wait returns.
func run(args []string, out, errOut io.Writer, wait func()) error {
	fs := flag.NewFlagSet("kfakeserver", flag.ContinueOnError)
	port := fs.Int("port", 9092, "port of the first broker; the others take the ones after it (0: any free ports)")
	brokers := fs.Int("brokers", 1, "number of brokers")
	partitions := fs.Int("partitions", kfakeopts.Partitions, "partitions of a topic created without a count")
	if err := servercmd.Parse(fs, args, errOut); err != nil {
		return err
	}
	if *brokers < 1 || *partitions < 1 || *port < 0 || *port+*brokers-1 > 65535 {
		return servercmd.UsageError{Err: errors.New("-brokers and -partitions must be at least 1, and the ports within 0-65535")}
	}
	ports := make([]int, *brokers)
	if *port > 0 {
		for i := range ports {
			ports[i] = *port + i
		}
	}
	c, err := kfake.NewCluster(append(kfakeopts.Defaults(),
		kfake.NumBrokers(*brokers),
		kfake.Ports(ports...),
		kfake.DefaultNumPartitions(*partitions),
	)...)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintln(out, "kfakeserver: listening on", strings.Join(c.ListenAddrs(), ","))
	wait()
	return nil
}
