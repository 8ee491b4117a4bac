package main

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/go-relay/relay"
)

// refuseInProcess returns a usage error for a mem:// URL given to a
// command that is one process of several (publish, consume, replay,
// provision): mem:// lives inside one process, so what such a command
// publishes vanishes when it exits and what it consumes nobody else can
// publish. relay bench publishes and consumes in one process, so it takes
// mem://; so does a bridge route (both ends inside the bridge process).
func refuseInProcess(e *env, cmd, raw string) (int, bool) {
	if !isInProcess(raw) {
		return exitOK, true
	}
	benchURL, _, _ := strings.Cut(relay.Redact(raw), "?") // bench makes its own group
	fmt.Fprintf(e.stderr, "relay %s: %s is in-process only: its messages live inside one process and vanish\n"+
		"  when it exits, so relay %s cannot share them with another process.\n"+
		"  Give the URL of a broker (%s), or try relay\n"+
		"  without one: \"relay bench %s TOPIC\" publishes and consumes in one process.\n",
		cmd, relay.Redact(raw), cmd, brokerSchemes(), benchURL)
	return exitUsage, false
}

// brokerSchemes lists the registered schemes other than mem://, as
// "amqp://, amqps://, ...": the binary's own list, so it cannot go stale.
func brokerSchemes() string {
	var out []string
	for _, s := range relay.Schemes() {
		if !isInProcess(s + "://") {
			out = append(out, s+"://")
		}
	}
	return strings.Join(out, ", ")
}

// isInProcess reports whether raw's adapter declares that its messages
// live inside one process (mem://).
func isInProcess(raw string) bool {
	d, _ := relay.DefaultsOf(raw)
	return d.InProcess
}

// isUsage reports whether err, from opening a URL or from publishing to or
// subscribing on a topic, is the caller's mistake (bad URL, unknown scheme,
// invalid topic name) rather than a runtime failure.
func isUsage(err error) bool {
	return errors.Is(err, relay.ErrBadURL) || errors.Is(err, relay.ErrUnknownScheme) || errors.Is(err, relay.ErrInvalidTopic)
}

// failed prints err for cmd and returns its exit code: 2 for a usage
// mistake (see isUsage), else 1.
func failed(e *env, cmd string, err error) int {
	if isUsage(err) {
		fmt.Fprintf(e.stderr, "relay %s: %v (see relay %s --help)\n", cmd, err, cmd)
		return exitUsage
	}
	fmt.Fprintf(e.stderr, "relay %s: %v\n", cmd, err)
	return exitFailure
}

// checkTopic returns a usage error for an empty topic argument.
func checkTopic(e *env, cmd, topic string) (int, bool) {
	if strings.TrimSpace(topic) == "" {
		return usageErr(e, cmd, "the topic is empty: give the name of a topic (a queue for sqs://)"), false
	}
	return exitOK, true
}

// groupURL returns raw with group=g added (see subscriberURL), or a usage
// error naming --group when neither --group nor group= in the URL gives a
// group and the backend needs one (every backend whose adapter does not
// declare relay.URLDefaults.NoGroup: sqs://, whose queue is the group).
func groupURL(e *env, cmd, raw, g string) (string, int, bool) {
	u, err := subscriberURL(raw, g)
	if err != nil {
		return "", usageErr(e, cmd, err.Error()), false
	}
	if g != "" {
		return u, exitOK, true
	}
	pu, err := url.Parse(raw)
	if err != nil || pu.Scheme == "" {
		return raw, exitOK, true // OpenSubscriber reports the bad URL
	}
	if d, _ := relay.DefaultsOf(raw); d.NoGroup || pu.Query().Get("group") != "" {
		return raw, exitOK, true
	}
	return "", usageErr(e, cmd, "--group is required: name the consumer group, e.g. --group ops (or add group=NAME to the URL)"), false
}
