// Package deliveryhook connects package relay's Message to package driver
// without exporting delivery plumbing from relay: relay sets Attach at
// init, driver calls it. Nothing else may use it.
package deliveryhook

import (
	"context"
	"time"
)

// Settlement is how a delivered message was settled; driver re-exports it.
type Settlement struct {
	Ack   bool          // true: processed; false: redeliver
	Delay time.Duration // redelivery delay for a Nack
}

// Settler receives the settlements of delivered messages; driver
// re-exports it.
type Settler interface {
	Settle(token uint64, s Settlement) error
}

// Kinds of Position.
const (
	PosNone = iota
	PosOffset
	PosPartition
	PosEntry
)

// Position is relay.Position's representation.
type Position struct {
	Kind      uint8
	Partition int32
	Offset    int64
	Entry     string
}

// Params is what driver.Deliver hands to relay.
type Params struct {
	Topic   string
	Attempt int
	Ctx     context.Context
	Settle  func(Settlement) error
	Settler Settler
	Token   uint64
	Pos     Position
}

// Attach attaches delivery state to a *relay.Message (passed as any, since
// this package cannot import relay). Set by package relay's init.
var Attach func(m any, p Params)

// AttachBatch attaches delivery state to every message of ms (a
// []*relay.Message, passed as any) with one allocation for the whole
// batch: the messages share p except its Attempt, Token and Pos, which each(i)
// gives for message i, with its position. Set by package relay's init.
var AttachBatch func(ms any, p Params, each func(i int) (attempt int, token uint64, pos Position))
