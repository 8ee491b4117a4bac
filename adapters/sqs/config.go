package sqs

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-relay/relay/driver/urlopt"
)

// Limits and defaults of SQS and SNS that the adapter applies.
const (
	// DefaultMaxBytes is SQS's and SNS's classic per-message limit (body
	// plus attribute names, types and values), also the per-batch total.
	DefaultMaxBytes = 256 << 10
	// MaxSQSBytes is the largest max_bytes for sqs:// (SQS accepts 1 MiB
	// messages since 2025; SNS still stops at 256 KiB).
	MaxSQSBytes = 1 << 20
	// MaxBatch is the entry limit of SendMessageBatch, PublishBatch,
	// DeleteMessageBatch and ChangeMessageVisibilityBatch.
	MaxBatch = 10
	// MaxAttributes is SQS's limit on message attributes per message.
	MaxAttributes = 10
	// MaxVisibility is SQS's cap on how long a received message can stay
	// invisible, counted from its receipt.
	MaxVisibility = 12 * time.Hour
	// MaxNackDelay is the longest NackAfter delay the adapter applies
	// natively (ChangeMessageVisibility): 12 h minus an hour left for
	// handling. Longer delays are capped so that the total stays within
	// MaxVisibility; see the package documentation.
	MaxNackDelay = 11 * time.Hour
)

// Defaults of Config fields left zero.
const (
	DefaultWait = 20 * time.Second
	// DefaultReceiveMargin is how much longer than its long poll a
	// ReceiveMessage call may take by default (see ReceiveTimeout).
	DefaultReceiveMargin   = 10 * time.Second
	DefaultVisibility      = 30 * time.Second
	DefaultPollers         = 4
	DefaultInFlight        = 100
	DefaultSendConcurrency = 10
	DefaultMaxAttempts     = 3
	DefaultAckLinger       = 10 * time.Millisecond
)

// Config configures publishers and subscribers of sqs:// and sns://.
// Every field is reachable as the URL query parameter named in its
// comment. The zero value takes the documented defaults; fields that turn
// a default behaviour off are named No....
type Config struct {
	// Region is the AWS region (region=). Default: the AWS environment
	// (AWS_REGION, the shared config profile).
	Region string
	// Endpoint is the base URL of both SQS and SNS (endpoint=), only for
	// emulators or private endpoints. Default: AWS's own endpoints.
	Endpoint string
	// SQSEndpoint and SNSEndpoint override Endpoint per service
	// (sqs_endpoint=, sns_endpoint=), e.g. for VPC interface endpoints.
	SQSEndpoint string
	SNSEndpoint string
	// Profile selects a shared config profile (profile=).
	Profile string
	// AccessKeyID, SecretAccessKey and SessionToken are static credentials
	// (access_key_id=, secret_key=, session_token=; the last two are
	// redacted by relay.Redact). Default: the AWS credential chain.
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	// CABundle is a PEM file of extra root CAs (ca_bundle=). It takes
	// precedence over the AWS_CA_BUNDLE environment variable.
	CABundle string
	// MaxAttempts bounds the SDK's attempts per call (max_attempts=).
	// Default 3.
	MaxAttempts int

	// NoCreateQueues: never create queues (create_queues=false); missing
	// queues are errors. Default: create them, FIFO when the name ends in
	// ".fifo".
	NoCreateQueues bool
	// NoCreateTopics: never create SNS topics (create_topics=false); they
	// are looked up with ListTopics instead, or, with Account, addressed
	// by an ARN built from partition, region and account without any
	// call. sns:// only.
	NoCreateTopics bool
	// Account is the AWS account ID of the topics (account=, 12 digits).
	// With NoCreateTopics, topic ARNs are built from it (in the region's
	// partition: aws, aws-cn, aws-us-gov, ...), so a publisher needs no
	// permission but sns:Publish. sns:// only.
	Account string
	// NoQueuePolicy: do not add the statement that lets the topic send to
	// a group's queue (queue_policy=false), for queues whose policy is
	// managed elsewhere. sns:// only. Default: the statement is merged into
	// the queue's existing policy, never replacing it.
	NoQueuePolicy bool
	// NoRawDelivery subscribes group queues without raw message delivery
	// (raw_delivery=false): SNS then wraps each message in its JSON
	// envelope, which the subscriber unwraps. sns:// only.
	NoRawDelivery bool
	// NoUnwrapSNS: deliver SNS JSON envelopes as they are
	// (unwrap_sns=false). Default: a body that is an SNS notification
	// envelope is unwrapped to its message and attributes.
	NoUnwrapSNS bool

	// Wait is the long-poll time of each ReceiveMessage call (wait=,
	// seconds or a duration, at most 20s). Default 20s; wait=0 in a URL
	// (a negative Wait) polls without waiting.
	Wait time.Duration
	// ReceiveTimeout bounds one ReceiveMessage call, long poll included
	// (receive_timeout=, seconds or a duration). Default Wait +
	// DefaultReceiveMargin. Without it a call on a network that went
	// silent (packets dropped, no reset) would wait for ever, and Health
	// would not see it; a call cut short leaves what it took invisible
	// until its visibility timeout, so nothing is lost.
	ReceiveTimeout time.Duration
	// MaxMessages is MaxNumberOfMessages per ReceiveMessage (max_messages=,
	// 1..10). Default 10.
	MaxMessages int
	// Pollers is how many ReceiveMessage calls a subscription keeps in
	// flight (pollers=). Default 4, and 1 on a FIFO queue so that the
	// delivery order within a message group never depends on which poller
	// returned first.
	Pollers int
	// InFlight bounds the messages a subscription holds unsettled,
	// received ahead included (inflight=). Default 100.
	InFlight int
	// InFlightBytes bounds the bytes (payload, ID, Key, metadata) of the
	// unsettled messages per subscription (inflight_bytes=, e.g. 64MiB),
	// beside InFlight; 0 takes driver.DefaultInFlightBytes (64 MiB), negative
	// means no byte bound.
	InFlightBytes int64
	// Visibility is the visibility timeout given to received messages
	// (visibility=, seconds or a duration, 1s..12h). Default 30s.
	Visibility time.Duration
	// ExtendEvery is how often the visibility of messages still being
	// handled is extended to Visibility again (extend_every=). Default
	// Visibility/3; extend_every=0 in a URL (a negative value) turns
	// extension off.
	ExtendEvery time.Duration
	// AckLinger is how long settlements wait for more to fill a batch
	// (ack_linger=): the shared layer's settlement linger
	// (driver.Options.SettleLinger). Default 10ms; ack_linger=0 in a URL (a
	// negative value) takes the shared layer's shortest (1ms). Acked
	// messages stay invisible meanwhile, so a linger costs no redelivery.
	AckLinger time.Duration

	// MaxReceive turns on the native dead-letter queue (max_receive=): a
	// message received this many times without being acked is moved to
	// DLQ by SQS (RedrivePolicy). Default 0: no dead-letter queue.
	MaxReceive int
	// DLQ names the dead-letter queue (dlq=). Default "<queue>-dlq"
	// ("<queue>-dlq.fifo" for a FIFO queue). Created unless NoCreateQueues.
	DLQ string
	// Retention is the MessageRetentionPeriod of queues this adapter
	// creates (retention=, 60s..14 days). Default: SQS's (4 days).
	Retention time.Duration
	// FIFO requires every topic to be FIFO (name ending in ".fifo") and
	// declares per-Key ordering in Capabilities (fifo=true). FIFO topics
	// work without it; it makes the promise checkable.
	FIFO bool
	// FIFOHighThroughput creates FIFO queues with per-message-group
	// deduplication and throughput limits (fifo_high_throughput=true).
	FIFOHighThroughput bool
	// MaxBytes is the per-message limit checked before sending and the
	// per-batch total (max_bytes=). Default 256 KiB; up to 1 MiB on
	// sqs:// (the queues must allow it), 256 KiB on sns://.
	MaxBytes int
	// SendConcurrency bounds the batches one Publish call sends at once
	// (send_concurrency=). Default 10: a Publish of 100 messages is one
	// round of calls.
	SendConcurrency int
	// NoBatchCalls sends one SendMessage / Publish call per message
	// instead of batch calls (batch_calls=false). For services whose batch
	// calls drop fields: goaws v0.5.4 ignores a batch entry's
	// DelaySeconds, so delayed messages sent in batches arrive at once.
	// AWS needs no such thing.
	NoBatchCalls bool

	// Group is the subscriber's group (group=): on sns:// each group has
	// its own queue "<topic>-<group>" subscribed to the topic (shortened
	// with ShortenName when longer than 80 characters). Required by
	// sns:// subscribers; rejected by sqs://, where the queue itself is
	// the group of competing consumers.
	Group string
	// Queue names the group's queue of an sns:// subscriber (queue=),
	// used as it is instead of the name derived from topic and group. Such
	// a subscriber serves one topic: subscribing it to a second one is an
	// error. The name ends in .fifo exactly when the topic does. Ignored by
	// sns:// publishers; rejected by sqs://.
	Queue string
}

var accountRe = regexp.MustCompile(`^[0-9]{12}$`)

// groupRe is the charset of group names: they become part of queue names.
var groupRe = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func (c Config) withDefaults() Config {
	c.Wait = cmp.Or(c.Wait, DefaultWait)
	c.ReceiveTimeout = cmp.Or(c.ReceiveTimeout, max(c.Wait, 0)+DefaultReceiveMargin)
	c.MaxMessages = cmp.Or(c.MaxMessages, MaxBatch)
	c.InFlight = cmp.Or(c.InFlight, DefaultInFlight)
	c.Visibility = cmp.Or(c.Visibility, DefaultVisibility)
	c.ExtendEvery = cmp.Or(c.ExtendEvery, c.Visibility/3)
	c.MaxBytes = cmp.Or(c.MaxBytes, DefaultMaxBytes)
	c.SendConcurrency = cmp.Or(c.SendConcurrency, DefaultSendConcurrency)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.AckLinger = cmp.Or(c.AckLinger, DefaultAckLinger)
	return c
}

// Validate reports every problem of c for the given scheme ("sqs" or
// "sns") at once. subscriber says whether c opens a subscriber, which on
// sns:// needs a Group; a publisher ignores Group (one Config, like one
// URL, serves both sides), but a Group on sqs:// is always an error.
func (c Config) Validate(scheme string, subscriber bool) error {
	var errs []error
	for _, pr := range c.problems(scheme, subscriber) {
		errs = append(errs, fmt.Errorf("relay/sqs: %s: %s", pr.field, pr.reason))
	}
	return errors.Join(errs...)
}

// problem is one thing wrong with a Config: the field, the URL parameter
// that sets it ("" when none does) and why.
type problem struct{ field, param, reason string }

func (c Config) problems(scheme string, subscriber bool) []problem {
	var ps []problem
	bad := func(field, param, format string, args ...any) {
		ps = append(ps, problem{field, param, fmt.Sprintf(format, args...)})
	}
	c = c.withDefaults()
	if scheme != SchemeSQS && scheme != SchemeSNS {
		bad("scheme", "", "%q is neither sqs nor sns", scheme)
	}
	if c.Account != "" && !accountRe.MatchString(c.Account) {
		bad("Account", "account", "%q is not a 12-digit AWS account ID", c.Account)
	}
	if (c.AccessKeyID == "") != (c.SecretAccessKey == "") {
		bad("AccessKeyID/SecretAccessKey", "access_key_id", "give both or neither")
	}
	if c.Wait > 20*time.Second {
		bad("Wait", "wait", "%v is above SQS's 20s long-poll maximum", c.Wait)
	}
	if c.ReceiveTimeout <= max(c.Wait, 0) {
		bad("ReceiveTimeout", "receive_timeout", "%v must be longer than the long poll (wait=%v)", c.ReceiveTimeout, max(c.Wait, 0))
	}
	if c.MaxMessages < 1 || c.MaxMessages > MaxBatch {
		bad("MaxMessages", "max_messages", "%d is outside 1..10", c.MaxMessages)
	}
	if c.Pollers < 0 {
		bad("Pollers", "pollers", "%d is negative", c.Pollers)
	}
	if c.InFlight < 1 {
		bad("InFlight", "inflight", "%d is below 1", c.InFlight)
	}
	if c.Visibility < time.Second || c.Visibility > MaxVisibility {
		bad("Visibility", "visibility", "%v is outside 1s..12h", c.Visibility)
	}
	if c.ExtendEvery > 0 && c.ExtendEvery >= c.Visibility {
		bad("ExtendEvery", "extend_every", "%v must be shorter than Visibility %v, or messages become visible before they are extended", c.ExtendEvery, c.Visibility)
	}
	if c.AckLinger > time.Second {
		bad("AckLinger", "ack_linger", "%v is above 1s; acks would wait too long", c.AckLinger)
	}
	if c.MaxReceive < 0 || c.MaxReceive > 1000 {
		bad("MaxReceive", "max_receive", "%d is outside 0..1000", c.MaxReceive)
	}
	if c.DLQ != "" && c.MaxReceive == 0 {
		bad("DLQ", "dlq", "set MaxReceive (max_receive=) too: it says when a message goes to the dead-letter queue")
	}
	if c.Retention != 0 && (c.Retention < time.Minute || c.Retention > 14*24*time.Hour) {
		bad("Retention", "retention", "%v is outside 60s..14 days", c.Retention)
	}
	maxBytes := MaxSQSBytes
	if scheme == SchemeSNS {
		maxBytes = DefaultMaxBytes
	}
	if c.MaxBytes < 1024 || c.MaxBytes > maxBytes {
		bad("MaxBytes", "max_bytes", "%d is outside 1024..%d for %s://", c.MaxBytes, maxBytes, scheme)
	}
	if c.SendConcurrency < 1 {
		bad("SendConcurrency", "send_concurrency", "%d is below 1", c.SendConcurrency)
	}
	if c.MaxAttempts < 1 {
		bad("MaxAttempts", "max_attempts", "%d is below 1", c.MaxAttempts)
	}
	switch {
	case scheme == SchemeSQS && c.Group != "":
		bad("Group", "group", "sqs:// has no groups: the queue (the topic) is the group of competing consumers; use sns://...?group=%s for a queue per group subscribed to an SNS topic", c.Group)
	case scheme == SchemeSNS && subscriber && c.Group == "":
		bad("Group", "group", "required for sns:// subscribers: each group gets its own queue <topic>-<group>")
	case c.Group != "" && (!groupRe.MatchString(c.Group) || len(c.Group) > 60):
		bad("Group", "group", "%q must be 1-60 characters of A-Z a-z 0-9 - _ (it is part of the queue name)", c.Group)
	}
	if err := c.validateQueue(scheme); err != nil {
		bad("Queue", "queue", "%s", strings.TrimPrefix(err.Error(), "relay/sqs: Queue: "))
	}
	return ps
}

// parseURL reads a sqs:// or sns:// URL into a Config. One URL serves
// both sides: every parameter of the scheme is read and checked on either
// side; a publisher ignores the subscriber's (group= included on sns://).
// Every problem is a *relay.URLError naming its parameter.
func parseURL(u *url.URL, subscriber bool) (Config, error) {
	scheme := strings.ToLower(u.Scheme)
	p := urlopt.New(u)
	var c Config
	if u.Host != "" || (u.Path != "" && u.Path != "/") || u.Opaque != "" {
		p.Fail("host", "%s:// takes no host or path (got %q); give an endpoint with endpoint=URL", scheme, u.Host+u.Path+u.Opaque)
	}
	c.Region = p.String("region", "")
	c.Endpoint = p.String("endpoint", "")
	c.SQSEndpoint = p.String("sqs_endpoint", "")
	c.SNSEndpoint = p.String("sns_endpoint", "")
	c.Profile = p.String("profile", "")
	c.AccessKeyID = p.String("access_key_id", "")
	c.SecretAccessKey = p.String("secret_key", "")
	c.SessionToken = p.String("session_token", "")
	c.CABundle = p.String("ca_bundle", "")
	c.MaxAttempts = p.Int("max_attempts", DefaultMaxAttempts, 1)

	c.NoCreateQueues = !p.Bool("create_queues", true)
	c.NoUnwrapSNS = !p.Bool("unwrap_sns", true)
	if scheme == SchemeSNS {
		c.NoCreateTopics = !p.Bool("create_topics", true)
		c.Account = p.String("account", "")
		c.NoQueuePolicy = !p.Bool("queue_policy", true)
		c.NoRawDelivery = !p.Bool("raw_delivery", true)
	}

	c.Wait = seconds(p, "wait", DefaultWait, true)
	c.ReceiveTimeout = seconds(p, "receive_timeout", 0, false)
	c.MaxMessages = p.Int("max_messages", MaxBatch, 1)
	c.Pollers = p.Int("pollers", 0, 1)
	c.InFlight = p.Int("inflight", DefaultInFlight, 1)
	c.InFlightBytes = p.Bytes("inflight_bytes", 0)
	c.Visibility = seconds(p, "visibility", DefaultVisibility, false)
	c.ExtendEvery = seconds(p, "extend_every", 0, true)
	c.AckLinger = seconds(p, "ack_linger", DefaultAckLinger, true)

	c.MaxReceive = p.Int("max_receive", 0, 0)
	c.DLQ = p.String("dlq", "")
	c.Retention = seconds(p, "retention", 0, false)
	c.FIFO = p.Bool("fifo", false)
	c.FIFOHighThroughput = p.Bool("fifo_high_throughput", false)
	c.MaxBytes = p.Size("max_bytes", DefaultMaxBytes, 1)
	c.SendConcurrency = p.Int("send_concurrency", DefaultSendConcurrency, 1)
	c.NoBatchCalls = !p.Bool("batch_calls", true)
	c.Group = p.String("group", "")
	c.Queue = p.String("queue", "")
	if err := p.Err(); err != nil {
		return c, err
	}
	for _, pr := range c.problems(scheme, subscriber) {
		p.Fail(pr.param, "%s", pr.reason)
	}
	return c, p.Err()
}

// seconds reads a time parameter given as whole seconds ("20") or a Go
// duration ("1m30s"). With zeroOff, an explicit 0 is returned as -1 (the
// Config convention for "off").
func seconds(p *urlopt.Params, name string, def time.Duration, zeroOff bool) time.Duration {
	v := p.String(name, "")
	if v == "" {
		return def
	}
	var d time.Duration
	if n, err := strconv.Atoi(v); err == nil {
		d = time.Duration(n) * time.Second
	} else if d, err = time.ParseDuration(v); err != nil {
		p.Fail(name, "%q is neither whole seconds nor a duration such as 90s or 5m", v)
		return def
	}
	if d < 0 {
		p.Fail(name, "%q is negative", v)
		return def
	}
	if d == 0 && zeroOff {
		return -1
	}
	return d
}
