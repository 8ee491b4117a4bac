package main

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/go-relay/relay"
)

func runProvision(e *env, args []string) int {
	fs := newFlagSet(e, "provision", "URL TOPIC", `
Create TOPIC and the consumer group --group on the broker, so that every
message published from now on is kept for the group, even before its first
consumer starts: the queue and its binding on RabbitMQ, the stream and its
group on Redis, the topic and the group's start offsets on Kafka
(start=earliest|latest in the URL), the queue on SQS (the queue is the
group: no --group), the topic, the group's queue and its subscription on
SNS. Idempotent: what exists is left as it is. Nothing is published or
consumed.

Exits 0 when done, 1 when the broker could not be reached or refused,
2 on a usage error.

Example:
  relay provision amqp://guest:guest@127.0.0.1:5672/ orders --group billing`)
	group := fs.String("group", "", "consumer `group` to create (or group= in the URL; not for sqs://)")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	verbose := fs.Bool("v", false, "log adapter events at debug level")
	if code, ok := parse(fs, args, 2, 2); !ok {
		return code
	}
	clientLogger(e, *verbose)
	if code, ok := refuseInProcess(e, "provision", fs.pos[0]); !ok {
		return code
	}
	rawURL, code, ok := groupURL(e, "provision", fs.pos[0], *group)
	if !ok {
		return code
	}
	topic := fs.pos[1]
	if code, ok := checkTopic(e, "provision", topic); !ok {
		return code
	}
	if *timeout <= 0 {
		return usageErr(e, "provision", "--timeout must be positive")
	}

	ctx, cancel := signalContext()
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, *timeout)
	defer cancelT()
	sub, err := relay.OpenSubscriber(ctx, rawURL)
	if err != nil {
		return failed(e, "provision", err)
	}
	defer sub.Close()
	p, ok := sub.(relay.Provisioner)
	if !ok {
		return usageErr(e, "provision", relay.Redact(rawURL)+": this backend has nothing to provision")
	}
	if err := p.Provision(ctx, topic); err != nil {
		return failed(e, "provision", err)
	}
	if g := groupOf(rawURL); g != "" {
		fmt.Fprintf(e.stdout, "provisioned topic %s for group %s on %s\n", topic, g, relay.Redact(fs.pos[0]))
	} else {
		fmt.Fprintf(e.stdout, "provisioned %s on %s\n", topic, relay.Redact(fs.pos[0]))
	}
	return exitOK
}

// groupOf returns the group= parameter of raw, or "".
func groupOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Query().Get("group")
}
