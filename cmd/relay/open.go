package main

import (
	"fmt"
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
	fmt.Fprintf(e.stderr, "relay %s: %s is in-process only: its messages live inside one process and vanish when it exits, "+
		"so relay %s cannot share them with another process. Give the URL of a broker (amqp://, kafka://, redis://, sqs://, sns://), "+
		"or try relay on mem:// with \"relay bench %s TOPIC\", which publishes and consumes in one process.\n",
		cmd, relay.Redact(raw), cmd, relay.Redact(raw))
	return exitUsage, false
}

// isInProcess reports whether raw is a mem:// URL.
func isInProcess(raw string) bool {
	scheme, _, ok := strings.Cut(raw, ":")
	return ok && strings.EqualFold(scheme, "mem")
}
