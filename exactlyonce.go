package relay

import (
	"context"
	"fmt"
	"net/url"
)

// ExactlyOnceSubscriber is a Subscriber whose acks commit atomically with
// the messages a paired publisher publishes while its messages are being
// handled: one broker transaction holds both, so a message's outputs and
// its ack take effect together, once, or not at all (Kafka's
// consume-transform-produce transactions; see adapters/kafka
// NewExactlyOnce).
//
// The router accepts relay.ExactlyOnce for a handler whose subscriber
// implements it and pairs with every output's publisher; the bridge opens
// such a pair with OpenExactlyOnce for a route with guarantee: exactly-once.
type ExactlyOnceSubscriber interface {
	Subscriber
	// ExactlyOnceWith reports whether pub is this subscriber's paired
	// publisher: what pub publishes while a delivered message is unsettled
	// commits in the same transaction as that message's ack. It does not
	// block and is safe for concurrent use.
	ExactlyOnceWith(pub Publisher) bool
}

// ExactlyOnceOpener is implemented by Openers that can open an exactly-once
// pair: a subscriber for src and a publisher for dst sharing one
// transactional session.
type ExactlyOnceOpener interface {
	// CheckExactlyOnce reports, without connecting, every reason src and
	// dst cannot form a pair (different clusters, a missing transactional
	// identity, invalid parameters).
	CheckExactlyOnce(src, dst *url.URL) error
	// OpenExactlyOnce opens the pair. ctx bounds connecting only.
	OpenExactlyOnce(ctx context.Context, src, dst *url.URL) (ExactlyOnceSubscriber, Publisher, error)
}

// CheckExactlyOnce reports, without connecting, whether a subscriber of src
// and a publisher to dst can form an exactly-once pair (see
// ExactlyOnceSubscriber): both URLs must have the same scheme, whose
// adapter implements ExactlyOnceOpener, and that adapter's own conditions
// must hold.
func CheckExactlyOnce(src, dst string) error {
	o, su, du, err := exactlyOnceOpener(src, dst)
	if err != nil {
		return err
	}
	return o.CheckExactlyOnce(su, du)
}

// OpenExactlyOnce opens an exactly-once pair: a subscriber of src and a
// publisher to dst (see ExactlyOnceSubscriber, CheckExactlyOnce). ctx
// bounds connecting only. Close both; the shared connection is released
// when both are closed.
func OpenExactlyOnce(ctx context.Context, src, dst string) (ExactlyOnceSubscriber, Publisher, error) {
	o, su, du, err := exactlyOnceOpener(src, dst)
	if err != nil {
		return nil, nil, err
	}
	return o.OpenExactlyOnce(ctx, su, du)
}

func exactlyOnceOpener(src, dst string) (ExactlyOnceOpener, *url.URL, *url.URL, error) {
	so, su, err := opener(src)
	if err != nil {
		return nil, nil, nil, err
	}
	_, du, err := opener(dst)
	if err != nil {
		return nil, nil, nil, err
	}
	if lookup(su.Scheme) != lookup(du.Scheme) {
		return nil, nil, nil, fmt.Errorf("relay: exactly-once needs the source and the destination on one backend, "+
			"in one transaction; got %s:// to %s://", su.Scheme, du.Scheme)
	}
	o, ok := so.(ExactlyOnceOpener)
	if !ok {
		return nil, nil, nil, fmt.Errorf("relay: the %s:// adapter offers no exactly-once pair (no broker transactions "+
			"spanning consumption and publishing); Kafka to Kafka does", su.Scheme)
	}
	return o, su, du, nil
}
