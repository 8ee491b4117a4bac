package driver

import (
	"context"

	"github.com/go-relay/relay"
)

// recvSub is a SubscribeDriver whose every subscription is r, with no
// capabilities.
type recvSub struct{ r Receiver }

func (f recvSub) Subscribe(context.Context, string) (Receiver, error) { return f.r, nil }
func (f recvSub) Capabilities() relay.Capabilities                    { return relay.Capabilities{} }
func (f recvSub) Close() error                                        { return nil }

// nopSettler gives a test receiver Settle, Release and Close that do
// nothing.
type nopSettler struct{}

func (nopSettler) Settle(context.Context, []Settle) error { return nil }
func (nopSettler) Release(context.Context, []any) error   { return nil }
func (nopSettler) Close(context.Context) error            { return nil }
