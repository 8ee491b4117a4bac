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

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/bridge"
)

func runStatus(e *env, args []string) int {
	fs := newFlagSet(e, "status", "", `
Print the live view of a running bridge: one line per route with its state,
messages forwarded (total and per second over the last 10 s), messages in
flight, source lag, retries, poisoned messages and the last error (with
"recovered ... from" once the route works again). It reads
GET /routes from the bridge's HTTP endpoint (see docs/bridge.md for the JSON,
which --json prints as is). URLs and errors come redacted from the bridge.
Exits 1 when no bridge answers at the address.

With --wait caught-up --route NAME it waits instead until the route's state
is caught-up (its source has been empty with nothing in flight for the
route's caught_up_after: the cutover signal of docs/migration.md) and exits
0, or exits 1 after --timeout with the route's last state and lag, or at
once when the route cannot report caught-up (its source cannot tell its
lag). --wait drained waits for a route with stop_when: drained to stop.`)
	addr := fs.String("http", bridge.DefaultHTTPAddress, "`address` of the bridge's HTTP endpoint (its http.address or --http), or a base URL http://host:port")
	asJSON := fs.Bool("json", false, "print the JSON of /routes instead of a table")
	timeout := fs.Duration("timeout", 5*time.Second, "bound for the request; with --wait, for the wait")
	wait := fs.String("wait", "", "`state` to wait for: caught-up or drained (needs --route)")
	routeName := fs.String("route", "", "`name` of the route --wait watches")
	if code, ok := parse(fs, args, 0, 0); !ok {
		return code
	}
	if *timeout <= 0 {
		return usageErr(e, "status", fmt.Sprintf("--timeout %v: must be positive", *timeout))
	}
	if *wait != "" {
		if *wait != bridge.StateCaughtUp && *wait != bridge.StateDrained {
			return usageErr(e, "status", fmt.Sprintf("--wait %q: want %s or %s", *wait, bridge.StateCaughtUp, bridge.StateDrained))
		}
		if *routeName == "" {
			return usageErr(e, "status", "--wait needs --route NAME")
		}
		return waitState(e, *addr, *routeName, *wait, *timeout)
	}
	st, body, err := fetchStatus(*addr, *timeout)
	if err != nil {
		fmt.Fprintf(e.stderr, "relay status: %v\n", err)
		return exitFailure
	}
	if *asJSON {
		_, _ = e.stdout.Write(body)
		return exitOK
	}
	printStatus(e.stdout, st)
	return exitOK
}

// fetchStatus reads GET /routes of the bridge at addr, within timeout.
func fetchStatus(addr string, timeout time.Duration) (bridge.Status, []byte, error) {
	var st bridge.Status
	base := addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	target := strings.TrimSuffix(base, "/") + "/routes"
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return st, nil, fmt.Errorf("--http %q: %v", addr, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		reason := err.Error()
		var ue *url.Error
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			reason = fmt.Sprintf("no answer within %v", timeout)
		case errors.As(err, &ue):
			reason = ue.Err.Error() // without the URL, which the message names
		}
		return st, nil, fmt.Errorf("no bridge answers at %s: %s (is relay bridge running there? see its http.address, or pass --http ADDR)", addr, reason)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return st, nil, fmt.Errorf("reading %s: %v", target, err)
	}
	if resp.StatusCode != http.StatusOK {
		return st, nil, fmt.Errorf("%s answered %s: not a relay bridge of this version (no /routes)", target, resp.Status)
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, nil, fmt.Errorf("%s did not answer with a bridge status: %v", target, err)
	}
	return st, body, nil
}

// waitState polls the bridge at addr every 200ms until route is in state
// want, for up to timeout. A bridge that does not answer, or has not
// started its routes yet, is asked again until the timeout; a route it
// does not have, one that can never be caught up, and a wait for drained
// on a route without stop_when: drained fail at once. A route that is
// drained has been caught up, so it satisfies a wait for caught-up too.
func waitState(e *env, addr, route, want string, timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		left := time.Until(deadline)
		st, _, err := fetchStatus(addr, max(min(left, 5*time.Second), 100*time.Millisecond))
		switch {
		case err != nil:
			last = err.Error()
		default:
			rs, ok := findRoute(st, route)
			if !ok {
				names := make([]string, len(st.Routes))
				for i, r := range st.Routes {
					names[i] = r.Name
				}
				fmt.Fprintf(e.stderr, "relay status: bridge %s has no route %q (it has: %s)\n", st.Bridge, route, strings.Join(names, ", "))
				return exitFailure
			}
			if rs.State == want || (want == bridge.StateCaughtUp && rs.State == bridge.StateDrained) {
				fmt.Fprintf(e.stdout, "route %s: %s (forwarded %d, source lag %s)\n", route, rs.State, rs.Forwarded, lagText(rs.SourceLag))
				return exitOK
			}
			if want == bridge.StateDrained && rs.StopWhen != bridge.StopWhenDrained {
				fmt.Fprintf(e.stderr, "relay status: route %s has no stop_when: drained, so it never drains on its own (state %s)\n", route, rs.State)
				return exitFailure
			}
			if st.Started == nil {
				// The bridge serves /routes before its routes start.
				last = fmt.Sprintf("bridge %s has not started its routes yet", st.Bridge)
				break
			}
			if want == bridge.StateCaughtUp && rs.CaughtUpUnknown != nil {
				fmt.Fprintf(e.stderr, "relay status: route %s can never report caught-up: %s\n", route, *rs.CaughtUpUnknown)
				return exitFailure
			}
			if want == bridge.StateCaughtUp && rs.State == bridge.StateStopped {
				fmt.Fprintf(e.stderr, "relay status: route %s is %s: it will not be caught up\n", route, rs.State)
				return exitFailure
			}
			last = fmt.Sprintf("route %s is %s, source lag %s, %d in flight", route, rs.State, lagText(rs.SourceLag), rs.InFlight)
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(e.stderr, "relay status: route %s not %s after %v: %s\n", route, want, timeout, last)
			return exitFailure
		}
		time.Sleep(min(200*time.Millisecond, max(time.Until(deadline), 0)))
	}
}

func findRoute(st bridge.Status, name string) (bridge.RouteStatus, bool) {
	for _, r := range st.Routes {
		if r.Name == name {
			return r, true
		}
	}
	return bridge.RouteStatus{}, false
}

// idle reports whether r runs on a replica that holds none of its
// source's partitions.
func idle(r bridge.RouteStatus) bool {
	return r.State == bridge.StateRunning && r.Holds != nil && r.Holds.Mode == relay.SharePartitions && len(r.Holds.Partitions) == 0
}

func lagText(lag *int64) string {
	if lag == nil {
		return "unknown"
	}
	return strconv.FormatInt(*lag, 10)
}

// printStatus writes st as a table, one route a line, then the last error
// of each route that has one, saying when the route recovered from it.
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
		if idle(r) {
			state += " (idle)"
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
		if le := r.LastError; le != nil {
			recovered := ""
			if le.RecoveredAt != nil {
				recovered = fmt.Sprintf("recovered %s ago (%s) from ", st.Time.Sub(*le.RecoveredAt).Round(time.Second), le.RecoveredAt.Format(time.RFC3339))
			}
			fmt.Fprintf(w, "%s: %slast error %s ago (%s): %s\n", r.Name, recovered,
				st.Time.Sub(le.Time).Round(time.Second), le.Time.Format(time.RFC3339), le.Message)
		}
		if r.NotReady != nil && r.State == bridge.StateRunning {
			fmt.Fprintf(w, "%s: not ready: %s\n", r.Name, *r.NotReady)
		}
		if idle(r) {
			fmt.Fprintf(w, "%s: idle: no partition of the source is assigned to this replica (the topic has fewer partitions than the group has members, or the group is rebalancing)\n", r.Name)
		}
		if r.CaughtUpSince != nil {
			fmt.Fprintf(w, "%s: caught up since %s (%s)\n", r.Name, r.CaughtUpSince.Format(time.RFC3339), st.Time.Sub(*r.CaughtUpSince).Round(time.Second))
		}
		if r.CaughtUpUnknown != nil {
			fmt.Fprintf(w, "%s: cannot report caught-up: %s\n", r.Name, *r.CaughtUpUnknown)
		}
		if f := r.LastForwarded; f != nil {
			pos := ""
			if f.SourcePosition != "" {
				pos = " at source position " + f.SourcePosition
			}
			fmt.Fprintf(w, "%s: last forwarded %s%s, %s\n", r.Name, f.ID, pos, f.Time.Format(time.RFC3339Nano))
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
