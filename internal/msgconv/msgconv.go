// Package msgconv holds what middleware/tracing and middleware/otelmetrics
// share about the OpenTelemetry messaging semantic conventions: attribute
// keys, the messaging.system value of each relay URL scheme, the reading of
// OTEL_SEMCONV_STABILITY_OPT_IN and the error.type of an error. It imports
// only the OpenTelemetry attribute package and relay.
package msgconv

import (
	"context"
	"errors"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"

	"github.com/go-relay/relay"
)

// Attribute keys of the current messaging conventions.
const (
	System          = attribute.Key("messaging.system")
	OperationType   = attribute.Key("messaging.operation.type")
	OperationName   = attribute.Key("messaging.operation.name")
	DestinationName = attribute.Key("messaging.destination.name")
	ConsumerGroup   = attribute.Key("messaging.consumer.group.name")
	PartitionID     = attribute.Key("messaging.destination.partition.id")
	MessageID       = attribute.Key("messaging.message.id")
	BatchCount      = attribute.Key("messaging.batch.message_count")
	BodySize        = attribute.Key("messaging.message.body.size")
	ErrorType       = attribute.Key("error.type")
	ServerAddress   = attribute.Key("server.address")
	ServerPort      = attribute.Key("server.port")
)

// Attribute keys of the v1.24 conventions, emitted besides the current ones
// under messaging/dup.
const (
	OldOperation  = attribute.Key("messaging.operation")
	OldKafkaGroup = attribute.Key("messaging.kafka.consumer.group")
)

// OldOperationValue maps a current messaging.operation.type to the v1.24
// messaging.operation value.
func OldOperationValue(opType string) string {
	switch opType {
	case "send":
		return "publish"
	case "process":
		return "deliver"
	}
	return opType // create, receive
}

// Stability says which conventions to emit.
type Stability int

const (
	// FromEnv reads OTEL_SEMCONV_STABILITY_OPT_IN (see Parse).
	FromEnv Stability = iota
	// Current emits the current messaging conventions only.
	Current
	// Dup emits the current conventions and, besides them, the v1.24
	// attribute and metric names. Span names and kinds are the current
	// ones (the convention asks for the new "single-valued" concepts
	// under messaging/dup).
	Dup
)

// EnvVar is the environment variable of the stability opt-in.
const EnvVar = "OTEL_SEMCONV_STABILITY_OPT_IN"

// Parse reads a comma-separated OTEL_SEMCONV_STABILITY_OPT_IN value:
// "messaging/dup" (which wins over "messaging") gives Dup; anything else,
// "messaging" or nothing, gives Current, because relay's instrumentation
// never emitted the v1.24 conventions: its previous attributes were already
// the current names, so "keep emitting what it emitted" and "emit the new
// conventions" are the same set.
func Parse(v string) Stability {
	for _, tok := range strings.Split(v, ",") {
		if strings.TrimSpace(tok) == "messaging/dup" {
			return Dup
		}
	}
	return Current
}

// Resolve returns s, reading the environment when s is FromEnv.
func Resolve(s Stability) Stability {
	if s == FromEnv {
		return Parse(os.Getenv(EnvVar))
	}
	return s
}

// SystemForURL returns the messaging.system value for a relay URL (by its
// scheme): the well-known values kafka, rabbitmq, aws_sqs, aws.sns,
// gcp_pubsub and nats (the NATS convention's value), and for the backends the convention does
// not name, redis, postgresql, sqlite (the spellings of the database
// conventions' db.system.name), mqtt and relay.memory. An unknown scheme is returned as it
// is; an unparsable URL gives "".
func SystemForURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	switch s := strings.ToLower(u.Scheme); s {
	case "kafka":
		return "kafka"
	case "amqp", "amqps":
		return "rabbitmq"
	case "sqs":
		return "aws_sqs"
	case "sns":
		return "aws.sns"
	case "nats":
		return "nats"
	case "gcppubsub":
		return "gcp_pubsub"
	case "mqtt", "mqtts":
		return "mqtt"
	case "redis", "rediss":
		return "redis"
	case "postgres", "postgresql":
		return "postgresql"
	case "sqlite":
		return "sqlite"
	case "mem":
		return "relay.memory"
	default:
		return s
	}
}

// ServerForURL returns the broker host and port of a relay URL: the first
// host of kafka://, amqp://, nats://, mqtt://, redis://, postgres:// URLs, port 0
// when the URL has none; "" for URLs without a host (sqs://, sns://,
// mem://, sqlite://, whose "host" is a file name, gcppubsub://, whose host
// is a project) and unparsable ones.
func ServerForURL(raw string) (address string, port int) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || strings.EqualFold(u.Scheme, "mem") || strings.EqualFold(u.Scheme, "sqlite") || strings.EqualFold(u.Scheme, "gcppubsub") {
		return "", 0
	}
	p, _ := strconv.Atoi(u.Port())
	return u.Hostname(), p
}

// Server returns the server.address and server.port attributes of
// address and port, omitting each that is unset.
func Server(address string, port int) []attribute.KeyValue {
	var a []attribute.KeyValue
	if address != "" {
		a = append(a, ServerAddress.String(address))
	}
	if port > 0 {
		a = append(a, ServerPort.Int(port))
	}
	return a
}

// sentinels name relay's errors in error.type.
var sentinels = []struct {
	err  error
	name string
}{
	{relay.ErrClosed, "relay.ErrClosed"},
	{relay.ErrLimit, "relay.ErrLimit"},
	{relay.ErrMessageTooLarge, "relay.ErrMessageTooLarge"},
	{relay.ErrNotSupported, "relay.ErrNotSupported"},
	{relay.ErrInvalidTopic, "relay.ErrInvalidTopic"},
	{relay.ErrSubscriptionEnded, "relay.ErrSubscriptionEnded"},
	{relay.ErrAlreadySettled, "relay.ErrAlreadySettled"},
	{context.DeadlineExceeded, "context.DeadlineExceeded"},
	{context.Canceled, "context.Canceled"},
}

// ErrorTypeOf returns the low-cardinality error.type of err: the name of a
// relay sentinel or context error it wraps, else the Go type (package
// path and name, e.g. "*github.com/go-relay/relay/router.PanicError") of the
// first error in its chain that is not a plain wrapper (fmt.Errorf,
// errors.Join, errors.New, relay.Permanent), else "_OTHER". nil gives "".
func ErrorTypeOf(err error) string {
	if err == nil {
		return ""
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		t := reflect.TypeOf(e)
		name := typeName(t)
		switch name {
		case "*fmt.wrapError", "*fmt.wrapErrors", "*errors.joinError", "*errors.errorString",
			"*github.com/go-relay/relay.permanentError":
			continue
		}
		if name != "" {
			return name
		}
	}
	return "_OTHER"
}

func typeName(t reflect.Type) string {
	ptr := ""
	if t.Kind() == reflect.Pointer {
		ptr, t = "*", t.Elem()
	}
	if t.Name() == "" {
		return ""
	}
	return ptr + t.PkgPath() + "." + t.Name()
}
