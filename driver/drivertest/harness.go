// Package drivertest is the conformance suite every relay adapter runs
// against its real (or wire-compatible) broker. Third-party adapters import
// it from their own tests:
//
//	func TestConformance(t *testing.T) {
//		drivertest.Run(t, drivertest.Harness{
//			NewPublisher:  func(t testing.TB) relay.Publisher { ... },
//			NewSubscriber: func(t testing.TB, group string) relay.Subscriber { ... },
//		})
//	}
//
// The suite is parameterised by the adapter's declared relay.Capabilities:
// a check the backend cannot pass by design is skipped with the reason
// printed, never silently. Each check uses fresh topic and group names.
package drivertest

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/go-relay/relay"
)

// Harness tells the suite how to reach the adapter under test.
type Harness struct {
	// NewPublisher opens a publisher. The suite closes it. Default: open
	// PublisherURL with relay.OpenPublisher; one of the two is required.
	NewPublisher func(t testing.TB) relay.Publisher
	// NewSubscriber opens a subscriber for group. The suite closes it.
	// Default: open SubscriberURL(group) with relay.OpenSubscriber; one of
	// the two is required.
	NewSubscriber func(t testing.TB, group string) relay.Subscriber
	// NewTopic returns a fresh topic name valid for the backend.
	// Default: "relay-test-" and a random suffix.
	NewTopic func(t testing.TB) string
	// NewGroup returns a fresh group name. Default: "g-" and a random suffix.
	NewGroup func(t testing.TB) string

	// Capabilities overrides what the publisher reports through
	// relay.CapabilityReporter.
	Capabilities *relay.Capabilities

	// PublisherURL and SubscriberURL, when set, let the suite check strict
	// URL parsing through relay.OpenPublisher/OpenSubscriber.
	PublisherURL  string
	SubscriberURL func(group string) string

	// NewSubscriberWith opens a subscriber for group with the options o
	// (its in-flight window). Optional: by default the suite opens
	// SubscriberURL(group) with inflight=N added through
	// relay.OpenSubscriber; with neither, the checks that need a given
	// window are skipped with the reason printed. The suite closes it.
	NewSubscriberWith func(t testing.TB, group string, o SubscriberOptions) relay.Subscriber

	// HungBroker, when set, puts a proxy between new clients and the broker
	// (for the adapters of this module, internal/testkit/testenv.NewFaultProxy),
	// stopped when t ends, and returns URLs that connect through it and
	// its Hang. The HungBrokerClose check uses it; without it the check is
	// skipped with HungBrokerSkip (or a generic reason) printed.
	HungBroker func(t testing.TB) HungBroker
	// HungBrokerSkip is why the harness has no HungBroker hook.
	HungBrokerSkip string

	// Restart, when set, restarts the broker (and returns once it accepts
	// connections again) for the reconnect check.
	Restart func(t testing.TB)

	// ReceiveTimeout bounds each wait for a message. Default 30s.
	ReceiveTimeout time.Duration
	// LargePayload is the size of the largest round-trip payload.
	// Default: 1 MiB, or less when MaxMessageBytes is smaller.
	LargePayload int
	// SkipShareCheck, when non-empty, is the reason the competing-consumers
	// check does not require both consumers to get messages (e.g. a single
	// Kafka partition). Loss is still checked.
	SkipShareCheck string
	// NoGroups, when non-empty, is the reason the backend has no groups
	// (e.g. sqs://, where the queue itself is the one group of competing
	// consumers): the fan-out check is skipped with it.
	NoGroups string
	// NoRedeliveryAfterEnd, when non-empty, is the reason the backend
	// cannot hand the messages a subscription left unsettled to a later
	// subscription of the group (e.g. Watermill's GoChannel, which drops
	// them): RedeliveryAfterClose, RedeliveryAfterCancel,
	// ClosedChannelUnsettled and NackAfterAcrossEnd are skipped with it,
	// and Settlement stops before its release step.
	NoRedeliveryAfterEnd string
	// NoCompetingConsumers, when non-empty, is the reason two subscribers
	// of one group cannot share the messages (e.g. every subscription
	// receives every message): CompetingConsumers is skipped with it.
	NoCompetingConsumers string
	// TopicExists, when set, tells whether topic is still on the broker;
	// RunRequestReply uses it to check that a requester's Close removed its
	// reply topic.
	TopicExists func(t testing.TB, topic string) bool
	// IgnoreGoroutines lists goroutines the client library legitimately
	// leaves running after Close (e.g. a shared idle-connection reaper).
	IgnoreGoroutines []goleak.Option
}

// HungBroker is a broker reached through a proxy that can stop answering.
type HungBroker struct {
	// PublisherURL and SubscriberURL connect through the proxy.
	PublisherURL  string
	SubscriberURL func(group string) string
	// Hang makes the broker stop answering: everything sent either way
	// through the proxy is dropped while connections stay open (no RST,
	// no FIN), and new connections hang too.
	Hang func()
}

// SubscriberOptions are what a check may ask of a subscriber beyond its
// group.
type SubscriberOptions struct {
	// InFlight is the subscription's in-flight window (the inflight= URL
	// parameter of every adapter of this module).
	InFlight int
	// InFlightBytes, when not 0, is the subscription's byte window (the
	// inflight_bytes= URL parameter of every adapter of this module).
	InFlightBytes int64
}

func (h *Harness) defaults(t *testing.T) {
	if h.NewPublisher == nil && h.PublisherURL != "" {
		raw := h.PublisherURL
		h.NewPublisher = func(t testing.TB) relay.Publisher {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p, err := relay.OpenPublisher(ctx, raw)
			if err != nil {
				t.Fatalf("opening a publisher: %v", err)
			}
			return p
		}
	}
	if h.NewSubscriber == nil && h.SubscriberURL != nil {
		h.NewSubscriber = func(t testing.TB, group string) relay.Subscriber {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := relay.OpenSubscriber(ctx, h.SubscriberURL(group))
			if err != nil {
				t.Fatalf("opening a subscriber for group %q: %v", group, err)
			}
			return s
		}
	}
	if h.NewPublisher == nil || h.NewSubscriber == nil {
		t.Fatal("drivertest: Harness needs NewPublisher or PublisherURL, and NewSubscriber or SubscriberURL")
	}
	if h.NewTopic == nil {
		h.NewTopic = func(testing.TB) string { return "relay-test-" + shortID() }
	}
	if h.NewGroup == nil {
		h.NewGroup = func(testing.TB) string { return "g-" + shortID() }
	}
	if h.NewSubscriberWith == nil && h.SubscriberURL != nil {
		h.NewSubscriberWith = func(t testing.TB, group string, o SubscriberOptions) relay.Subscriber {
			t.Helper()
			raw := h.SubscriberURL(group)
			u, err := url.Parse(raw)
			if err != nil {
				t.Fatalf("harness subscriber URL %q: %v", relay.Redact(raw), err)
			}
			q := u.Query()
			q.Set("inflight", strconv.Itoa(o.InFlight))
			if o.InFlightBytes != 0 {
				q.Set("inflight_bytes", strconv.FormatInt(o.InFlightBytes, 10))
			}
			u.RawQuery = q.Encode()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := relay.OpenSubscriber(ctx, u.String())
			if err != nil {
				t.Fatalf("opening a subscriber with inflight=%d: %v", o.InFlight, err)
			}
			return s
		}
	}
	if h.ReceiveTimeout <= 0 {
		h.ReceiveTimeout = 30 * time.Second
	}
}

// shortID is the random tail of a UUIDv7, unique enough for test names.
func shortID() string {
	id := strings.ReplaceAll(relay.NewID(), "-", "")
	return id[len(id)-12:]
}
