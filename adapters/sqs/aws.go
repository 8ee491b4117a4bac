package sqs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Option adjusts what a URL cannot express. Options are for programs
// and tests; every Config field is also a URL parameter.
type Option func(*options)

type options struct {
	awsCfg    *aws.Config
	transport func(http.RoundTripper) http.RoundTripper
	logger    *slog.Logger
}

// WithAWSConfig uses cfg (credentials, region, retryer, HTTP client) as
// loaded by the program instead of loading the default configuration.
// Config.Region and the endpoints still override it when set.
func WithAWSConfig(cfg aws.Config) Option { return func(o *options) { o.awsCfg = &cfg } }

// WithRoundTripper wraps the HTTP transport of the SQS and SNS clients,
// e.g. to count or trace calls. Not used together with WithAWSConfig's own
// HTTP client, which is then wrapped instead when it is an *http.Client.
func WithRoundTripper(wrap func(http.RoundTripper) http.RoundTripper) Option {
	return func(o *options) { o.transport = wrap }
}

// WithLogger sets the logger for transient errors and warnings.
// Default slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// clients are the AWS clients of one publisher or subscriber. The HTTP
// transport is its own, so that Close can drop its idle connections.
type clients struct {
	sqs       *sqs.Client
	sns       *sns.Client // nil for sqs://
	region    string
	partition string
	closeIdle func()
}

// sdkLogger passes the AWS SDK's log entries to slog: its warnings as
// warnings, everything else (retries) at debug level.
type sdkLogger struct{ log *slog.Logger }

func (l sdkLogger) Logf(c logging.Classification, format string, v ...any) {
	level := slog.LevelDebug
	if c == logging.Warn {
		level = slog.LevelWarn
	}
	ctx := context.Background()
	if !l.log.Enabled(ctx, level) {
		return // no formatting for entries nobody reads
	}
	l.log.Log(ctx, level, "relay/sqs: aws sdk: "+fmt.Sprintf(format, v...))
}

func (c *clients) close() {
	if c.closeIdle != nil {
		c.closeIdle()
	}
}

// newClients loads the AWS configuration for cfg and builds the clients.
// ctx bounds loading (which may read files or query an instance role).
func newClients(ctx context.Context, cfg Config, o options, withSNS bool) (*clients, error) {
	var ac aws.Config
	if o.awsCfg != nil {
		ac = o.awsCfg.Copy()
	} else {
		var opts []func(*config.LoadOptions) error
		if cfg.Region != "" {
			opts = append(opts, config.WithRegion(cfg.Region))
		}
		if cfg.Profile != "" {
			opts = append(opts, config.WithSharedConfigProfile(cfg.Profile))
		}
		if cfg.AccessKeyID != "" {
			opts = append(opts, config.WithCredentialsProvider(
				credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)))
		}
		if cfg.CABundle != "" {
			pem, err := os.ReadFile(cfg.CABundle)
			if err != nil {
				return nil, fmt.Errorf("relay/sqs: ca_bundle: %w", err)
			}
			opts = append(opts, config.WithCustomCABundle(bytes.NewReader(pem)))
		}
		if o.logger != nil {
			// Also for what loading itself logs (the credential chain's
			// instance-metadata client warns on stderr otherwise).
			opts = append(opts, config.WithLogger(sdkLogger{o.logger}))
		}
		var err error
		ac, err = config.LoadDefaultConfig(ctx, opts...)
		if err != nil {
			if env := os.Getenv("AWS_CA_BUNDLE"); env != "" && cfg.CABundle == "" {
				return nil, fmt.Errorf("relay/sqs: loading the AWS configuration failed; AWS_CA_BUNDLE=%q may be the cause (it must name a readable PEM file; fix or unset it, or pass ca_bundle=PATH): %w", env, err)
			}
			return nil, fmt.Errorf("relay/sqs: loading the AWS configuration: %w", err)
		}
		if cfg.AccessKeyID == "" {
			ac.Credentials = credentialsHint{ac.Credentials}
		}
		// The SDK's own messages (retries of a call, connection trouble)
		// go to our logger rather than straight to stderr: a retried
		// publish may have been delivered twice, and an operator reading
		// debug logs should see why.
		if o.logger != nil {
			ac.Logger = sdkLogger{o.logger}
			ac.ClientLogMode |= aws.LogRetries
		}
	}
	if cfg.Region != "" {
		ac.Region = cfg.Region
	}
	if ac.Region == "" {
		return nil, errors.New("relay/sqs: no AWS region: set region= (or AWS_REGION, or a profile with a region)")
	}
	ac.RetryMaxAttempts = cfg.MaxAttempts

	// Our own transport: the configured one (custom CA bundle included) or
	// the SDK's default, with more idle connections per host for pollers,
	// concurrent batches and settlement.
	var tr *http.Transport
	switch hc := ac.HTTPClient.(type) {
	case nil:
		tr = awshttp.NewBuildableClient().GetTransport()
	case *awshttp.BuildableClient:
		tr = hc.GetTransport()
	}
	c := &clients{region: ac.Region, partition: partitionOf(ac.Region)}
	var rt http.RoundTripper
	if tr != nil {
		tr.MaxIdleConnsPerHost = 64
		tr.MaxIdleConns = 128
		rt = tr
		c.closeIdle = tr.CloseIdleConnections
	} else if hc, ok := ac.HTTPClient.(*http.Client); ok {
		rt = hc.Transport
		if rt == nil {
			rt = http.DefaultTransport
		}
		c.closeIdle = hc.CloseIdleConnections
	}
	if rt != nil {
		if o.transport != nil {
			rt = o.transport(rt)
		}
		ac.HTTPClient = &http.Client{
			Transport: rt,
			// SQS and SNS never redirect; a redirect is an error to see.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}

	sqsEP, snsEP := firstNonEmpty(cfg.SQSEndpoint, cfg.Endpoint), firstNonEmpty(cfg.SNSEndpoint, cfg.Endpoint)
	c.sqs = sqs.NewFromConfig(ac, func(so *sqs.Options) {
		if sqsEP != "" {
			so.BaseEndpoint = aws.String(sqsEP)
		}
	})
	if withSNS {
		c.sns = sns.NewFromConfig(ac, func(so *sns.Options) {
			if snsEP != "" {
				so.BaseEndpoint = aws.String(snsEP)
			}
		})
	}
	return c, nil
}

// credentialsHint is the default configuration's credential chain, whose
// failure says what to set: without credentials in the environment, a
// profile or the URL, the chain ends at the EC2 instance metadata service,
// and its error ("no EC2 IMDS role found") does not tell a user trying
// relay on an emulator what is missing.
type credentialsHint struct{ aws.CredentialsProvider }

func (h credentialsHint) Retrieve(ctx context.Context) (aws.Credentials, error) {
	c, err := h.CredentialsProvider.Retrieve(ctx)
	if err != nil {
		return c, fmt.Errorf("relay/sqs: no usable AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "+
			"(any value for an emulator such as goaws), or AWS_PROFILE, or access_key_id= and secret_key= in the URL: %w", err)
	}
	return c, nil
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// partitionOf returns the ARN partition of an AWS region.
func partitionOf(region string) string {
	switch {
	case strings.HasPrefix(region, "cn-"):
		return "aws-cn"
	case strings.HasPrefix(region, "us-gov-"):
		return "aws-us-gov"
	case strings.HasPrefix(region, "us-isob-"):
		return "aws-iso-b"
	case strings.HasPrefix(region, "us-isof-"):
		return "aws-iso-f"
	case strings.HasPrefix(region, "us-iso-"):
		return "aws-iso"
	case strings.HasPrefix(region, "eu-isoe-"):
		return "aws-iso-e"
	}
	return "aws"
}

// apiCode is the error code of an AWS API error, or "".
func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// isQueueMissing: the queue does not exist (AWS JSON and query error
// shapes, and the codes emulators use).
func isQueueMissing(err error) bool {
	var qd *sqstypes.QueueDoesNotExist
	if errors.As(err, &qd) {
		return true
	}
	switch apiCode(err) {
	case "QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", "NonExistentQueue":
		return true
	}
	return false
}

// isQueueExists: CreateQueue found a queue of that name with other attributes.
func isQueueExists(err error) bool {
	var qe *sqstypes.QueueNameExists
	if errors.As(err, &qe) {
		return true
	}
	switch apiCode(err) {
	case "QueueAlreadyExists", "QueueNameExists", "AWS.SimpleQueueService.QueueNameExists", "AWS.SimpleQueueService.QueueAlreadyExists":
		return true
	}
	return false
}

// isTopicMissing: the SNS topic does not exist.
func isTopicMissing(err error) bool {
	var nf *snstypes.NotFoundException
	if errors.As(err, &nf) {
		return true
	}
	switch apiCode(err) {
	case "NotFound", "NotFoundException", "AWS.SimpleNotificationService.NonExistentTopic":
		return true
	}
	return false
}

// isUnsupported: the service does not know the action (emulators answer
// unknown actions with a bare 400 that is no API error at all).
func isUnsupported(err error) bool {
	switch apiCode(err) {
	case "InvalidAction", "UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation", "UnknownOperationException":
		return true
	}
	var de *smithy.DeserializationError
	var re *smithyhttp.ResponseError
	if errors.As(err, &de) && errors.As(err, &re) {
		switch re.HTTPStatusCode() {
		case http.StatusBadRequest, http.StatusNotFound, http.StatusNotImplemented:
			return true
		}
	}
	return false
}

// isTransient: the call failed in transit or by a passing fault of the
// service (network, throttling, 5xx); the same call may succeed later.
// Errors of the request itself, and ctx's, are not transient.
func isTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "Throttling", "ThrottlingException", "RequestThrottled", "ServiceUnavailable", "InternalError", "InternalFailure", "KmsThrottled":
			return true
		}
		return ae.ErrorFault() == smithy.FaultServer
	}
	var send *smithyhttp.RequestSendError
	if errors.As(err, &send) {
		return true
	}
	var re *smithyhttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() >= 500
}

// isInvalidHandle: the receipt handle no longer refers to a message we
// hold (deleted, or its visibility expired and it was received again).
func isInvalidHandle(err error) bool {
	var rh *sqstypes.ReceiptHandleIsInvalid
	if errors.As(err, &rh) {
		return true
	}
	var nf *sqstypes.MessageNotInflight
	if errors.As(err, &nf) {
		return true
	}
	switch apiCode(err) {
	case "ReceiptHandleIsInvalid", "MessageNotInflight", "AWS.SimpleQueueService.MessageNotInFlight", "AWS.SimpleQueueService.ReceiptHandleIsInvalid":
		return true
	}
	return false
}

// isPermanentCode says whether a batch entry failure code is not worth
// retrying.
func isPermanentCode(code string, senderFault bool) bool {
	if senderFault {
		return true
	}
	switch code {
	case "ReceiptHandleIsInvalid", "MessageNotInflight", "InvalidParameterValue", "InvalidMessageContents", "MessageTooLong":
		return true
	}
	return false
}

// EntryError is the failure of one entry of a batch call, as SQS or SNS
// reported it.
type EntryError struct {
	Code        string
	Message     string
	SenderFault bool // the request was at fault; retrying it unchanged fails again
}

func (e *EntryError) Error() string {
	who := "service"
	if e.SenderFault {
		who = "sender"
	}
	return fmt.Sprintf("relay/sqs: entry failed (%s fault): %s: %s", who, e.Code, e.Message)
}
