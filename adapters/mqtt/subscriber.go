package mqtt

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// NewSubscriber returns a subscriber for sc.Group. It connects once
// within ctx to check the broker and the credentials; each subscription
// then has a connection and a persistent session of its own (see the
// package doc). It is safe for concurrent use and implements
// relay.Provisioner and relay.HealthChecker.
func NewSubscriber(ctx context.Context, cfg Config, sc SubscriberConfig) (relay.Subscriber, error) {
	if err := errors.Join(cfg.Validate(), sc.Validate()); err != nil {
		return nil, err
	}
	cfg.defaults()
	sc.defaults()
	probe := cfg.newClient("relay-probe-"+relay.NewID(), true, nil, nil)
	if _, err := connect(ctx, probe); err != nil {
		return nil, err
	}
	probe.Disconnect(quiesce)
	d := &subDriver{cfg: cfg, sc: sc, caps: capabilities(cfg.MaxBytes)}
	return driver.NewSubscriber(d, driver.Options{
		InFlight:      sc.InFlight,
		InFlightBytes: sc.InFlightBytes,
		Logger:        cfg.Logger,
		Group:         sc.Group,
	}), nil
}

type subDriver struct {
	cfg  Config
	sc   SubscriberConfig
	caps relay.Capabilities
}

func (d *subDriver) Capabilities() relay.Capabilities { return d.caps }

// ValidateTopic implements driver.TopicValidator.
func (d *subDriver) ValidateTopic(topic string) error { return validateTopic(topic) }

func (d *subDriver) filter(topic string) string { return "$share/" + d.sc.Group + "/" + topic }

// Subscribe implements driver.SubscribeDriver: it claims a session,
// connects it and subscribes it to $share/<group>/<topic> before it
// returns, so that what is published afterwards is kept for the group.
func (d *subDriver) Subscribe(ctx context.Context, topic string) (driver.Receiver, error) {
	if err := validateTopic(topic); err != nil {
		return nil, err
	}
	for n := 1; n <= maxSessions; n++ {
		id, release, ok, err := d.lockSession(topic, n)
		if err != nil {
			return nil, err
		}
		if ok {
			return d.subscribe(ctx, topic, id, release)
		}
	}
	return nil, fmt.Errorf("relay/mqtt: %d subscriptions of topic %q by group %q hold every session of instance %q on this host", maxSessions, topic, d.sc.Group, d.sc.Instance)
}

func (d *subDriver) subscribe(ctx context.Context, topic, id string, release func()) (driver.Receiver, error) {
	r := newReceiver(d.cfg, d.filter(topic), id, release)
	if err := r.connect(ctx); err != nil {
		_ = r.Close(ctx)
		return nil, err
	}
	d.cfg.Logger.Debug("relay: subscribed", "filter", r.filter, "session", id)
	return r, nil
}

// Provision implements driver.ProvisionDriver: it creates the persistent
// session that this host's first subscription of topic by the group's
// instance uses, subscribed to $share/<group>/<topic>, and disconnects,
// so that the broker queues the group's messages for it until that
// subscription connects. When a subscription of this host holds that
// session, it exists already. Idempotent.
func (d *subDriver) Provision(ctx context.Context, topic string) error {
	if err := validateTopic(topic); err != nil {
		return err
	}
	id, release, ok, err := d.lockSession(topic, 1)
	if err != nil || !ok {
		return err
	}
	defer release()
	// No handler: what the session holds already is left unacknowledged,
	// for the subscription (the broker resends it marked DUP).
	cl := d.cfg.newClient(id, false, nil, nil)
	if _, err := connect(ctx, cl); err != nil {
		return err
	}
	defer cl.Disconnect(quiesce)
	return subscribe(ctx, cl, d.filter(topic))
}

// RemoveTopic implements driver.RemoveTopicDriver. MQTT keeps sessions,
// not topics: it removes the sessions of topic of this subscriber's
// group and instance that no subscription of the host holds, with the
// messages they hold, by connecting each with a clean session, from
// number 1 up to the first that did not exist. Other groups' sessions
// stay. Idempotent.
func (d *subDriver) RemoveTopic(ctx context.Context, topic string) error {
	if err := validateTopic(topic); err != nil {
		return err
	}
	for n := 1; n <= maxSessions; n++ {
		id, release, ok, err := d.lockSession(topic, n)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		present, err := d.discard(ctx, id)
		release()
		if err != nil || !present {
			return err
		}
	}
	return nil
}

// discard removes session id from the broker and reports whether it
// existed: a connection that keeps the session tells (CONNACK's session
// present), then one with a clean session ends it.
func (d *subDriver) discard(ctx context.Context, id string) (present bool, err error) {
	for _, clean := range []bool{false, true} {
		cl := d.cfg.newClient(id, clean, nil, nil)
		p, err := connect(ctx, cl)
		if err != nil {
			return false, err
		}
		cl.Disconnect(quiesce)
		present = present || p
	}
	return present, nil
}

// Close implements driver.SubscribeDriver: each subscription had its own
// connection, closed with it.
func (d *subDriver) Close() error { return nil }
