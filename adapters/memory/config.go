package memory

// Scheme is the URL scheme of this backend.
const Scheme = "mem"

// DefaultMaxBytes is the default limit on a message's encoded size.
const DefaultMaxBytes = 16 << 20

// PublisherConfig configures a publisher. The zero value is usable.
type PublisherConfig struct {
	// MaxBytes limits payload plus ID, Key and metadata (max_bytes=). Default 16 MiB.
	MaxBytes int
}

// SubscriberConfig configures a subscriber.
type SubscriberConfig struct {
	// Group names the group of competing consumers (group=). Required.
	Group string
	// InFlight bounds unsettled messages per subscription (inflight=). Default 64.
	InFlight int
	// InFlightBytes bounds the bytes (payload, ID, Key, metadata) of the
	// unsettled messages per subscription (inflight_bytes=, e.g. 64MiB),
	// beside InFlight; 0 takes driver.DefaultInFlightBytes (64 MiB), negative
	// means no byte bound.
	InFlightBytes int64
}
