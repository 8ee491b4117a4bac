// Package adaptertest is the conformance suite every relay adapter runs
// against its real (or wire-compatible) broker. Third-party adapters import
// it from their own tests:
//
//	func TestConformance(t *testing.T) {
//		adaptertest.Run(t, adaptertest.Harness{
//			NewPublisher:  func(t testing.TB) relay.Publisher { ... },
//			NewSubscriber: func(t testing.TB, group string) relay.Subscriber { ... },
//		})
//	}
//
// The suite is parameterised by the adapter's declared relay.Capabilities:
// a check the backend cannot pass by design is skipped with the reason
// printed, never silently. Each check uses fresh topic and group names.
package adaptertest

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/go-relay/relay"
)

// Harness tells the suite how to reach the adapter under test.
type Harness struct {
	// NewPublisher opens a publisher. Required. The suite closes it.
	NewPublisher func(t testing.TB) relay.Publisher
	// NewSubscriber opens a subscriber for group. Required. The suite closes it.
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
	// IgnoreGoroutines lists goroutines the client library legitimately
	// leaves running after Close (e.g. a shared idle-connection reaper).
	IgnoreGoroutines []goleak.Option
}

func (h *Harness) defaults(t *testing.T) {
	if h.NewPublisher == nil || h.NewSubscriber == nil {
		t.Fatal("adaptertest: Harness.NewPublisher and NewSubscriber are required")
	}
	if h.NewTopic == nil {
		h.NewTopic = func(testing.TB) string { return "relay-test-" + shortID() }
	}
	if h.NewGroup == nil {
		h.NewGroup = func(testing.TB) string { return "g-" + shortID() }
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
