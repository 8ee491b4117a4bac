package driver

import (
	"context"

	"github.com/go-relay/relay"
)

// WholeSender is optionally implemented by a PublishDriver that splits a
// Publish call into broker batches itself: to pack batches by bytes as
// well as by count, or to send several batches concurrently where the
// broker keeps no order across them. When a driver implements it, the
// Publisher calls SendAll once per Publish call, after every message passed
// the limit checks, instead of calling SendBatch per MaxBatch messages.
//
// SendAll has SendBatch's contract for the whole slice: nil only when the
// broker accepted every message; partial failure as a *relay.PublishError
// naming exactly the messages that were not accepted; ctx honoured. It
// makes one attempt, like SendBatch, and marks what may be sent again
// with Retryable: the Publisher calls SendAll again with exactly those
// messages (in their order) until they are accepted or ctx ends.
type WholeSender interface {
	SendAll(ctx context.Context, topic string, msgs []*relay.Message) error
}
