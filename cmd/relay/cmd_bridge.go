package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/bridge"
)

func loadConfig(e *env, path string) (*bridge.Config, int) {
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintf(e.stderr, "relay: %v\n", err)
		return nil, exitConfig
	}
	cfg, err := bridge.Parse(data, path, e.getenv)
	if err != nil {
		var ce *bridge.ConfigError
		if errors.As(err, &ce) {
			for _, p := range ce.Problems {
				fmt.Fprintln(e.stderr, p.String())
			}
			fmt.Fprintf(e.stderr, "relay: %s: %d problem(s)\n", path, len(ce.Problems))
		} else {
			fmt.Fprintf(e.stderr, "relay: %v\n", err)
		}
		return nil, exitConfig
	}
	return cfg, exitOK
}

func runValidate(e *env, args []string) int {
	fs := newFlagSet(e, "validate", "", `
Check a bridge config without connecting to anything: YAML syntax, unknown
or duplicate fields, types, required values, ${ENV} variables, URL schemes
known to this binary. Every problem is printed on its own line as
FILE:LINE:COL: FIELD.PATH: MESSAGE (on stderr), then a count. Exits 0 when
the config is valid, 3 when it is not. Passwords never appear in the output.
Use "relay bridge --dry-run" to also check that every endpoint is reachable.`)
	file := fs.String("c", "", "config `file` (required)")
	fs.StringVar(file, "config", "", "config `file` (same as -c)")
	if code, ok := parse(fs, args, 0, 0); !ok {
		return code
	}
	if *file == "" {
		fmt.Fprintln(e.stderr, "relay validate: -c FILE is required")
		return exitUsage
	}
	cfg, code := loadConfig(e, *file)
	if cfg == nil {
		return code
	}
	fmt.Fprintf(e.stdout, "%s: ok (%d route(s))\n", *file, len(cfg.Routes))
	return exitOK
}

func runBridge(e *env, args []string) int {
	fs := newFlagSet(e, "bridge", "", `
Run the bridge daemon: forward every route of the config until SIGTERM or
SIGINT, then drain (messages in flight reach their destination and are
acked; messages received but not started go back to their group) and exit.
Logs go to stderr, with one "route summary" line per route every
log.summary_interval (default 30s). /healthz, /readyz, /metrics, /routes
(the live view that "relay status" prints) and a status page on / (open it
in a browser) are served on the config's http.address (default
127.0.0.1:9470, loopback only).

With --dry-run, connect to every endpoint, print whether it is reachable and
whether each destination and poison topic has a group that would receive
what the route publishes (where the broker can tell: see docs/bridge.md),
and exit without forwarding anything: 0 when all are reachable, 4 when
some are not or a topic has no group (PostgreSQL and SNS would drop what
the route forwards, RabbitMQ would refuse it as unroutable).`)
	file := fs.String("c", "", "config `file` (required)")
	fs.StringVar(file, "config", "", "config `file` (same as -c)")
	dryRun := fs.Bool("dry-run", false, "check that every endpoint is reachable and every destination has a group, then exit")
	timeout := fs.Duration("timeout", 15*time.Second, "bound for --dry-run")
	httpAddr := fs.String("http", "", "listen `address` for /healthz, /readyz, /metrics, /routes and the status page / (overrides http.address; \"off\" disables)")
	logLevel := fs.String("log-level", "", "debug, info, warn or error (overrides log.level)")
	logFormat := fs.String("log-format", "", "text or json (overrides log.format)")
	summary := fs.String("log-summary-interval", "", "how often to log a summary line per route, e.g. 1m; 0 or off disables (overrides log.summary_interval; default 30s)")
	if code, ok := parse(fs, args, 0, 0); !ok {
		return code
	}
	if *file == "" {
		fmt.Fprintln(e.stderr, "relay bridge: -c FILE is required")
		return exitUsage
	}
	// The flags are checked before the file, and as flags: a bad value is
	// the command line's mistake (exit 2), not a line of the config file.
	msg := checkBridgeFlags(*httpAddr, *logLevel, *logFormat)
	var summaryEvery time.Duration
	if *summary != "" {
		var err error
		if summaryEvery, err = bridge.ParseSummaryInterval(*summary); err != nil {
			msg = strings.TrimPrefix(msg+"; ", "; ") + "--log-summary-interval " + err.Error()
		}
	}
	if msg != "" {
		return usageErr(e, "bridge", msg)
	}
	cfg, code := loadConfig(e, *file)
	if cfg == nil {
		return code
	}
	switch *httpAddr {
	case "":
	case "off":
		cfg.HTTP.Disabled = true
	default:
		cfg.HTTP.Address = *httpAddr
	}
	if *logLevel != "" {
		cfg.Log.Level = *logLevel
	}
	if *logFormat != "" {
		cfg.Log.Format = *logFormat
	}
	if summaryEvery != 0 {
		cfg.Log.SummaryInterval = summaryEvery
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(e.stderr, err)
		return exitConfig
	}

	if *dryRun {
		return dryRunBridge(e, *cfg, *timeout)
	}

	log := newLogger(e, cfg.WithDefaults().Log)
	slog.SetDefault(log)
	b, err := bridge.New(*cfg, bridge.Options{Logger: log})
	if err != nil {
		fmt.Fprintln(e.stderr, err)
		return exitConfig
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var srv *http.Server
	srvDone := make(chan error, 1)
	if hc := b.Config().HTTP; !hc.Disabled {
		ln, err := net.Listen("tcp", hc.Address)
		if err != nil {
			log.Error("cannot listen for /healthz, /readyz, /metrics, /routes", "address", hc.Address, "err", err)
			return exitFailure
		}
		srv = &http.Server{Handler: b.Handler(), ReadHeaderTimeout: 10 * time.Second}
		log.Info("serving /healthz, /readyz, /metrics, /routes and the status page", "address", ln.Addr().String(),
			"status_page", pageURL(ln.Addr()))
		go func() { srvDone <- srv.Serve(ln) }()
	}
	err = b.Run(ctx)
	if srv != nil {
		if ctx.Err() == nil {
			// The routes stopped on their own (stop_when: drained): keep
			// answering /routes a moment, so that a `relay status --wait
			// drained` polling it sees the final state and counts.
			time.Sleep(drainedLinger)
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
		<-srvDone
	}
	var ce *bridge.ConfigError
	if errors.As(err, &ce) {
		// An endpoint its adapter refused when opening it (an adapter
		// without relay.URLChecker, so validation could not see it): a
		// config problem, not a runtime failure.
		fmt.Fprintln(e.stderr, err)
		return exitConfig
	}
	if errors.Is(err, bridge.ErrUnrecoverable) {
		log.Error("bridge stopped: a route cannot recover; what it had in flight is redelivered to the other replicas", "err", err)
		return exitFailure
	}
	var ie *bridge.IncompleteError
	if errors.As(err, &ie) {
		log.Error("bridge stopped: a route drained its source but not every message reached the destination (see its poison topic)", "err", err)
		return exitFailure
	}
	if err != nil {
		log.Error("bridge stopped before every message in flight was settled; they will be redelivered", "err", err)
		return exitFailure
	}
	return exitOK
}

// drainedLinger is how long relay bridge keeps serving /routes after its
// routes stopped on their own: several of `relay status --wait`'s polls.
const drainedLinger = time.Second

// checkBridgeFlags returns what is wrong with the values of the flags
// that override the config file, or "". The rules are those of the config
// fields they override.
func checkBridgeFlags(httpAddr, logLevel, logFormat string) string {
	var bad []string
	if httpAddr != "" && httpAddr != "off" {
		if _, port, err := net.SplitHostPort(httpAddr); err != nil || port == "" {
			bad = append(bad, fmt.Sprintf("--http %q: want host:port (e.g. 127.0.0.1:9470 or :9470) or off", httpAddr))
		}
	}
	switch logLevel {
	case "", "debug", "info", "warn", "error":
	default:
		bad = append(bad, fmt.Sprintf("--log-level %q: want debug, info, warn or error", logLevel))
	}
	switch logFormat {
	case "", "text", "json":
	default:
		bad = append(bad, fmt.Sprintf("--log-format %q: want text or json", logFormat))
	}
	return strings.Join(bad, "; ")
}

func dryRunBridge(e *env, cfg bridge.Config, timeout time.Duration) int {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// Adapters log connection attempts; keep the table readable.
	slog.SetDefault(slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	st := bridge.Check(ctx, cfg)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUTE\tEND\tURL\tTOPIC\tSTATUS")
	unreachable, noGroup := 0, 0
	for _, s := range st {
		status := fmt.Sprintf("ok (%s)", s.Elapsed.Round(time.Millisecond))
		switch {
		case s.Err != nil:
			unreachable++
			status = "UNREACHABLE: " + oneLine(s.Err)
		case errors.Is(s.Groups, relay.ErrNoGroup):
			noGroup++
			status = "NO GROUP: " + oneLine(s.Groups)
		case errors.Is(s.Groups, relay.ErrNotSupported):
			status += "; cannot tell whether a group gets its messages: " + strings.TrimPrefix(oneLine(s.Groups), relay.ErrNotSupported.Error()+": ")
		case s.Groups != nil:
			status += "; could not check for a group: " + oneLine(s.Groups)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Route, s.End, s.URL, s.Topic, status)
	}
	_ = tw.Flush()
	var bad []string
	if unreachable > 0 {
		bad = append(bad, fmt.Sprintf("%d of %d endpoint(s) unreachable", unreachable, len(st)))
	}
	if noGroup > 0 {
		bad = append(bad, fmt.Sprintf("%d topic(s) with no group to deliver to: provision one (relay provision) before the bridge runs", noGroup))
	}
	if len(bad) > 0 {
		fmt.Fprintf(e.stderr, "relay bridge --dry-run: %s\n", strings.Join(bad, "; "))
		return exitUnreachable
	}
	fmt.Fprintf(e.stderr, "relay bridge --dry-run: all %d endpoint(s) reachable\n", len(st))
	return exitOK
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

func newLogger(e *env, lc bridge.LogConfig) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(lc.Level))
	opts := &slog.HandlerOptions{Level: level}
	if lc.Format == "json" {
		return slog.New(slog.NewJSONHandler(e.stderr, opts))
	}
	return slog.New(slog.NewTextHandler(e.stderr, opts))
}

// pageURL is the address of the status page served on addr, to open in a
// browser: on this machine when addr is every interface.
func pageURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String() + "/"
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}
