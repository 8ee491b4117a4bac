// Command pstestserver runs pstest, the fake Pub/Sub server of the Go
// client library, as a process of its own (as internal/pubsubfake serves
// it: Pull answers as soon as a message arrives), so that relay's
// gcppubsub tests and benchmarks can run against a server outside the test
// process, as the service would be, and a test can SIGKILL a consumer
// while the server keeps its messages:
//
//	go run ./internal/cmd/pstestserver -port 8085 &
//	RELAY_TEST_GCP_PROJECT=relay-test PUBSUB_EMULATOR_HOST=127.0.0.1:8085 \
//		go test -run '^$' -bench Ratio ./adapters/gcppubsub
//
// It listens on 127.0.0.1 and runs until SIGINT or SIGTERM; everything is
// held in memory.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/go-relay/relay/internal/testkit/pubsubfake"
	"github.com/go-relay/relay/internal/testkit/servercmd"
)

func main() { servercmd.Main("pstestserver", run) }

// run parses args (usage text goes to errOut), starts the server, prints
// its address to out, and stops the server once wait returns.
func run(args []string, out, errOut io.Writer, wait func()) error {
	fs := flag.NewFlagSet("pstestserver", flag.ContinueOnError)
	port := fs.Int("port", 8085, "port to listen on (0: any free port)")
	if err := servercmd.Parse(fs, args, errOut); err != nil {
		return err
	}
	if *port < 0 || *port > 65535 {
		return servercmd.UsageError{Err: errors.New("-port must be within 0-65535")}
	}
	srv, err := pubsubfake.Start("127.0.0.1:" + strconv.Itoa(*port))
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Fprintln(out, "pstestserver: listening on", srv.Addr)
	wait()
	return nil
}
