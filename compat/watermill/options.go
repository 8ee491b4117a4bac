package watermill

import (
	"log/slog"
	"time"
)

// Options tune the Watermill-facing Publisher and Subscriber of this
// package. The zero value is ready to use.
type Options struct {
	// KeyMetadata names the Watermill metadata entry that carries relay's
	// Message.Key, both ways: on Publish the entry's value becomes Key and
	// the entry is not sent as metadata; on delivery a non-empty Key is
	// put back under this name. Default DefaultKeyMetadata ("relay_key").
	KeyMetadata string
	// NackDelay, when positive, turns a Watermill Nack into relay's
	// NackAfter(NackDelay) instead of Nack (redeliver at once). Default 0.
	NackDelay time.Duration
	// Logger receives settlement errors the Watermill API cannot return
	// (Ack and Nack return only a bool). Default slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	o.KeyMetadata = keyName(o.KeyMetadata)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}
