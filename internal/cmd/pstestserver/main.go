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
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/go-relay/relay/internal/testkit/pubsubfake"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	err := run(os.Args[1:], os.Stdout, os.Stderr, func() { <-stop })
	var usage usageError
	switch {
	case errors.As(err, &usage):
		fmt.Fprintln(os.Stderr, "pstestserver:", err)
		os.Exit(2)
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case err != nil:
		fmt.Fprintln(os.Stderr, "pstestserver:", err)
		os.Exit(1)
	}
}

// usageError is a bad command line.
type usageError struct{ error }

// run parses args (usage text goes to errOut), starts the server, prints
// its address to out, and stops the server once wait returns.
func run(args []string, out, errOut io.Writer, wait func()) error {
	fs := flag.NewFlagSet("pstestserver", flag.ContinueOnError)
	fs.SetOutput(errOut)
	port := fs.Int("port", 8085, "port to listen on (0: any free port)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	if *port < 0 || *port > 65535 {
		return usageError{errors.New("-port must be within 0-65535")}
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
