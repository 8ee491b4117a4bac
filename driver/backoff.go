package driver

import (
	"context"

	"github.com/go-relay/relay/driver/backoff"
)

type backoffState struct {
	b backoff.Backoff
	n int
}

func (b *backoffState) sleep(ctx context.Context) bool { b.n++; return b.b.Sleep(ctx) }
func (b *backoffState) reset()                         { b.n = 0; b.b.Reset() }
