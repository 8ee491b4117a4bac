package amqp

import (
	"fmt"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/go-relay/relay"
)

// An AMQP message's properties and headers travel in one content-header
// frame, which must fit the connection's negotiated frame_max (RabbitMQ's
// default is 128 KiB). A larger one makes the broker close the whole
// connection (FRAME_ERROR), so Publish refuses it up front with a
// *relay.LimitError about "metadata size".

const (
	frameOverhead    = 8  // type, channel, size, end marker
	contentHeaderFix = 14 // class, weight, body size, property flags
	// defaultFrameMax is assumed until a connection negotiated its own.
	defaultFrameMax = 131072
)

// headerLimit is the largest content-header payload for frameMax (0: not
// known yet, RabbitMQ's default is assumed; relay never asks for an
// unlimited frame size).
func headerLimit(frameMax int) int {
	if frameMax <= 0 {
		frameMax = defaultFrameMax
	}
	return frameMax - frameOverhead
}

// messageHeaderSize is the encoded size of the content header that encode(m)
// produces, computed without building it.
func messageHeaderSize(m *relay.Message) int {
	n := contentHeaderFix + 1 + len(m.ID) + 1 // message-id, delivery-mode
	table := 0
	for k, v := range m.Metadata {
		if propertyKeys[k] {
			n += 1 + len(v)
			continue
		}
		table += 1 + len(k) + 1 + 4 + len(v)
	}
	if table > 0 {
		n += 4 + table
	}
	return n
}

// publishingHeaderSize is the encoded size of p's content header.
func publishingHeaderSize(p *amqp091.Publishing) int {
	n := contentHeaderFix
	for _, s := range []string{p.ContentType, p.ContentEncoding, p.CorrelationId, p.ReplyTo, p.Expiration, p.MessageId, p.Type, p.UserId, p.AppId} {
		if s != "" {
			n += 1 + len(s)
		}
	}
	if p.DeliveryMode != 0 {
		n++
	}
	if p.Priority != 0 {
		n++
	}
	if !p.Timestamp.IsZero() {
		n += 8
	}
	if len(p.Headers) > 0 {
		n += 4 + tableSize(p.Headers)
	}
	return n
}

func tableSize(t amqp091.Table) int {
	n := 0
	for k, v := range t {
		n += 1 + len(k) + 1 + valueSize(v)
	}
	return n
}

func valueSize(v any) int {
	switch x := v.(type) {
	case nil:
		return 0
	case string:
		return 4 + len(x)
	case []byte:
		return 4 + len(x)
	case bool, int8, uint8:
		return 1
	case int16, uint16:
		return 2
	case int32, uint32, float32:
		return 4
	case int, int64, uint64, float64, time.Time:
		return 8
	case amqp091.Decimal:
		return 5
	case amqp091.Table:
		return 4 + tableSize(x)
	case []any:
		n := 4
		for _, e := range x {
			n += 1 + valueSize(e)
		}
		return n
	}
	return 4 + len(fmt.Sprint(v))
}
