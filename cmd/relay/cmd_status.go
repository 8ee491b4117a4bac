package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-relay/relay/bridge"
)

func runStatus(e *env, args []string) int {
	fs := newFlagSet(e, "status", "", `
Print the live view of a running bridge: one line per route with its state,
messages forwarded (total and per second over the last 10 s), messages in
flight, source lag, retries, poisoned messages and the last error. It reads
GET /routes from the bridge's HTTP endpoint (see docs/bridge.md for the JSON,
which --json prints as is). URLs and errors come redacted from the bridge.
Exits 1 when no bridge answers at the address.`)
	addr := fs.String("http", bridge.DefaultHTTPAddress, "`address` of the bridge's HTTP endpoint (its http.address or --http), or a base URL http://host:port")
	asJSON := fs.Bool("json", false, "print the JSON of /routes instead of a table")
	timeout := fs.Duration("timeout", 5*time.Second, "bound for the request")
	if code, ok := parse(fs, args, 0, 0); !ok {
		return code
	}
	if *timeout <= 0 {
		return usageErr(e, "status", fmt.Sprintf("--timeout %v: must be positive", *timeout))
	}
	base := *addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	target := strings.TrimSuffix(base, "/") + "/routes"
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return usageErr(e, "status", fmt.Sprintf("--http %q: %v", *addr, err))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		reason := err.Error()
		var ue *url.Error
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			reason = fmt.Sprintf("no answer within %v", *timeout)
		case errors.As(err, &ue):
			reason = ue.Err.Error() // without the URL, which the message names
		}
		fmt.Fprintf(e.stderr, "relay status: no bridge answers at %s: %s (is relay bridge running there? see its http.address, or pass --http ADDR)\n", *addr, reason)
		return exitFailure
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		fmt.Fprintf(e.stderr, "relay status: reading %s: %v\n", target, err)
		return exitFailure
	}
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(e.stderr, "relay status: %s answered %s: not a relay bridge of this version (no /routes)\n", target, resp.Status)
		return exitFailure
	}
	var st bridge.Status
	if err := json.Unmarshal(body, &st); err != nil {
		fmt.Fprintf(e.stderr, "relay status: %s did not answer with a bridge status: %v\n", target, err)
		return exitFailure
	}
	if *asJSON {
		_, _ = e.stdout.Write(body)
		return exitOK
	}
	printStatus(e.stdout, st)
	return exitOK
}

// printStatus writes st as a table, one route a line, then the last error
// of each route that has one.
func printStatus(w io.Writer, st bridge.Status) {
	up := "not started"
	if st.Started != nil {
		up = "up " + st.Time.Sub(*st.Started).Round(time.Second).String()
	}
	fmt.Fprintf(w, "bridge %s, %s, %d route(s), at %s\n", st.Bridge, up, len(st.Routes), st.Time.Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUTE\tSTATE\tFORWARDED\tPER SEC (10s)\tIN FLIGHT\tLAG\tRETRIES\tFAILED\tPOISONED\tFROM\tTO")
	for _, r := range st.Routes {
		state := r.State
		if !r.Ready && r.State == bridge.StateRunning {
			state += " (not ready)"
		}
		lag := "-"
		if r.SourceLag != nil {
			lag = strconv.FormatInt(*r.SourceLag, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%d (%s)\t%s\t%d\t%d\t%d\t%s\t%s\n",
			r.Name, state, r.Forwarded, r.ForwardedPerSec10s, r.InFlight, byteSize(r.InFlightBytes), lag,
			r.Retries, r.Failed, r.Poisoned, endpoint(r.From), endpoint(r.To))
	}
	_ = tw.Flush()
	for _, r := range st.Routes {
		if r.LastError != nil {
			fmt.Fprintf(w, "%s: last error %s ago (%s): %s\n", r.Name,
				st.Time.Sub(r.LastError.Time).Round(time.Second), r.LastError.Time.Format(time.RFC3339), r.LastError.Message)
		}
		if r.NotReady != nil && r.State == bridge.StateRunning {
			fmt.Fprintf(w, "%s: not ready: %s\n", r.Name, *r.NotReady)
		}
	}
}

func endpoint(e bridge.RouteEnd) string { return e.URL + " " + e.Topic }

// byteSize formats n bytes with a binary unit.
func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
