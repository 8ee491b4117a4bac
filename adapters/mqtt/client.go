package mqtt

import (
	"context"
	"fmt"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
)

// newClient returns a paho client for one connection with relay's
// settings: MQTT 3.1.1, no automatic reconnect (the shared layer retries
// with its backoff and each connection gets a client of its own), acks
// sent when the application settles, messages handed over in order, and
// no store (what is unacknowledged is the broker's to resend).
func (c Config) newClient(id string, clean bool, onMessage paho.MessageHandler, onLost paho.ConnectionLostHandler) paho.Client {
	o := paho.NewClientOptions().AddBroker(c.Broker).SetClientID(id).SetCleanSession(clean).
		SetUsername(c.Username).SetPassword(c.Password).SetProtocolVersion(4).
		SetAutoReconnect(false).SetConnectRetry(false).SetAutoAckDisabled(true).SetOrderMatters(true).
		SetConnectTimeout(c.ConnectTimeout).SetKeepAlive(c.KeepAlive).SetPingTimeout(c.KeepAlive / 2).
		SetStore(nopStore{})
	if c.TLS != nil {
		o.SetTLSConfig(c.TLS)
	}
	if onMessage != nil {
		o.SetDefaultPublishHandler(onMessage)
	}
	if onLost != nil {
		o.SetConnectionLostHandler(onLost)
	}
	return paho.NewClient(o)
}

// connect connects cl within ctx and reports whether the broker resumed
// a session (CONNACK's session present). When ctx ends first, the attempt
// is abandoned: it ends within ConnectTimeout and is then disconnected;
// the error wraps ctx's error whenever ctx has ended.
func connect(ctx context.Context, cl paho.Client) (sessionPresent bool, err error) {
	tok := cl.Connect()
	select {
	case <-tok.Done():
	case <-ctx.Done():
		go func() { <-tok.Done(); cl.Disconnect(0) }()
		return false, ctx.Err()
	}
	if err := tok.Error(); err != nil {
		if ctx.Err() != nil {
			// The attempt's own timeout ended with ctx: report ctx's
			// error, as a caller whose deadline passed expects.
			return false, fmt.Errorf("relay/mqtt: connecting: %w (last attempt: %v)", ctx.Err(), err)
		}
		return false, fmt.Errorf("relay/mqtt: connecting: %w", err)
	}
	return tok.(*paho.ConnectToken).SessionPresent(), nil
}

// await waits for tok within ctx.
func await(ctx context.Context, tok paho.Token, what string) error {
	select {
	case <-tok.Done():
		if err := tok.Error(); err != nil {
			return fmt.Errorf("relay/mqtt: %s: %w", what, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("relay/mqtt: %s: %w", what, ctx.Err())
	}
}

// subscribe subscribes cl to filter at QoS 1 within ctx and checks the
// granted QoS (0x80: refused, for instance by the broker's ACL).
func subscribe(ctx context.Context, cl paho.Client, filter string) error {
	tok := cl.Subscribe(filter, 1, nil)
	if err := await(ctx, tok, "subscribing to "+filter); err != nil {
		return err
	}
	if q, ok := tok.(*paho.SubscribeToken).Result()[filter]; ok && q > 1 {
		return fmt.Errorf("relay/mqtt: the broker refused the subscription %s (return code %#x)", filter, q)
	}
	return nil
}

// quiesce is how long Disconnect waits for the DISCONNECT packet to be
// written (in milliseconds).
const quiesce = 250

// nopStore keeps nothing: a subscriber's unacknowledged messages stay
// with the broker, which resends them to the session, and a publisher's
// unconfirmed messages fail their Publish call, which the shared layer
// sends again. paho's memory store would hold a copy of each.
type nopStore struct{}

func (nopStore) Open()                             {}
func (nopStore) Put(string, packets.ControlPacket) {}
func (nopStore) Get(string) packets.ControlPacket  { return nil }
func (nopStore) All() []string                     { return nil }
func (nopStore) Del(string)                        {}
func (nopStore) Close()                            {}
func (nopStore) Reset()                            {}
