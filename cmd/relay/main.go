// Command relay is the relay daemon and universal client: it runs bridges
// between brokers and publishes, consumes, benchmarks and replays messages
// on any backend that relay supports, addressed by URL.
//
//	relay bridge   -c bridge.yaml [--dry-run]   run the forwarding daemon
//	relay validate -c bridge.yaml               check a bridge config
//	relay publish  URL TOPIC                    publish messages
//	relay consume  URL TOPIC --group G          print messages
//	relay bench    URL TOPIC                    measure throughput and latency
//	relay replay   URL POISON_TOPIC --group G   send poisoned messages back
//	relay provision URL TOPIC --group G         create a topic and a group
//	relay status   [--http ADDR]                print a running bridge's routes
//	relay verify   -c bridge.yaml               compare a route's source and destination
//	relay migrate offsets --from URL --to URL --group G   translate Kafka group offsets
//
// Every command takes --help. Exit codes: 0 success; 1 runtime failure
// (cannot connect, publish failed, timeout, drain timed out, no bridge
// answers relay status); 2 usage error
// (unknown command or flag, bad flag value, bad URL, missing --group, empty
// topic); 3 invalid config file; 4 dry run found an unreachable endpoint
// or a destination topic with no group.
// See docs/bridge.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/go-relay/relay"
)

// Exit codes; documented in docs/bridge.md and in usage.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitConfig      = 3
	exitUnreachable = 4
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(env *env, args []string) int
}

var commands []command

func init() {
	commands = []command{
		{"bridge", "run the forwarding daemon described by a config file", runBridge},
		{"validate", "check a bridge config and print every problem", runValidate},
		{"publish", "publish messages (payload from stdin or --data)", runPublish},
		{"consume", "print the messages of a topic with their metadata", runConsume},
		{"bench", "measure publish and consume throughput and latency", runBench},
		{"replay", "move messages from a poison topic back to their origin", runReplay},
		{"provision", "create a topic and a consumer group so that messages are kept for it", runProvision},
		{"status", "print the routes of a running bridge: state, rates, in flight, lag, errors; --wait caught-up", runStatus},
		{"verify", "compare a route's source and destination: missing, extra and mismatched IDs", runVerify},
		{"migrate", "migrate offsets: translate Kafka consumer group offsets to the destination", runMigrate},
		{"version", "print the version and the URL schemes this binary supports", runVersion},
	}
}

// env is what a command reads and writes, so that tests can run commands
// in process.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) (string, bool)
}

func main() {
	e := &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.LookupEnv}
	os.Exit(run(e, os.Args[1:]))
}

func run(e *env, args []string) int {
	if len(args) == 0 {
		usage(e.stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 {
			for _, c := range commands {
				if c.name == args[1] {
					return c.run(e, []string{"--help"})
				}
			}
		}
		usage(e.stdout)
		return exitOK
	case "-version", "--version":
		name = "version"
	}
	for _, c := range commands {
		if c.name == name {
			return c.run(e, args[1:])
		}
	}
	fmt.Fprintf(e.stderr, "relay: unknown command %q\n\n", name)
	usage(e.stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "relay %s: one publish/subscribe client and bridge for every broker.\n\nUsage: relay COMMAND [flags] [args]\n\nCommands:\n", version)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, `
Run "relay COMMAND --help" for a command's flags.

URLs: %s
  e.g. amqp://user:pass@host:5672/vhost  kafka://host:9092  redis://host:6379/0
       sqs://?region=R  sns://?region=R  postgres://user@host:5432/db
       nats://host:4222  mqtt://host:1883  gcppubsub://PROJECT  mem://name
  mem:// is in-process only: relay bench and bridge routes take it;
  publish, consume, replay and provision refuse it.
`+exitCodesHelp, strings.Join(relay.Schemes(), ", "))
}

const exitCodesHelp = `
Exit codes:
  0  success
  1  runtime failure: cannot connect, publish failed, timeout, drain timed out,
     no bridge answers (relay status)
  2  usage error: unknown command or flag, bad flag value, missing or bad
     argument: bad URL (unknown scheme or parameter), missing --group,
     empty topic, mem:// outside relay bench
  3  invalid config file (relay validate, relay bridge)
  4  dry run: an endpoint is unreachable, or a destination topic has no
     group to deliver to (relay bridge --dry-run)
`

func runVersion(e *env, args []string) int {
	fs := newFlagSet(e, "version", "", "Print the version and the URL schemes this binary supports.")
	if code, ok := parse(fs, args, 0, 0); !ok {
		return code
	}
	fmt.Fprintf(e.stdout, "relay %s\nschemes: %s\n", version, strings.Join(relay.Schemes(), ", "))
	return exitOK
}

// flagSet wraps flag.FlagSet with the usage text of a command.
type flagSet struct {
	*flag.FlagSet
	e   *env
	pos []string // positional arguments, after parse
}

func newFlagSet(e *env, name, argsUsage, description string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: relay %s [flags] %s\n\n%s\n\nFlags:\n", name, argsUsage, strings.TrimSpace(description))
		fs.PrintDefaults()
		fmt.Fprint(w, exitCodesHelp)
	}
	return &flagSet{FlagSet: fs, e: e}
}

// parse parses flags that may come before, between or after positional
// arguments, and checks the number of positionals. On --help it prints the
// usage to stdout and returns exitOK; on an error, exitUsage. ok is true
// when the command should go on.
func parse(fs *flagSet, args []string, minPos, maxPos int) (code int, ok bool) {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" || a == "--h" {
			fs.SetOutput(fs.e.stdout)
			fs.Usage()
			return exitOK, false
		}
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) { // -help=true and the like
				return exitOK, false
			}
			return exitUsage, false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		// flag stops at the first non-flag; "--" ends flags for good.
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if len(pos) < minPos || (maxPos >= 0 && len(pos) > maxPos) {
		if len(pos) < minPos {
			fmt.Fprintf(fs.Output(), "relay %s: missing arguments\n", fs.Name())
		} else {
			fmt.Fprintf(fs.Output(), "relay %s: unexpected argument %q\n", fs.Name(), pos[maxPos])
		}
		fs.Usage()
		return exitUsage, false
	}
	fs.pos = pos
	return exitOK, true
}
