package sqs

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/smithy-go/logging"
)

// The SDK's entries reach the adapter's logger: warnings as warnings,
// retries (and anything else) at debug level, dropped when debug is off.
func TestSDKLogger(t *testing.T) {
	var buf bytes.Buffer
	l := sdkLogger{slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	l.Logf(logging.Debug, "retrying request %s, attempt %d", "SQS/SendMessageBatch", 2)
	if buf.Len() != 0 {
		t.Fatalf("a debug entry was written with the level at warn: %q", buf.String())
	}
	l.Logf(logging.Warn, "failed to discard remaining HTTP response body: %v", "EOF")
	out := buf.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "relay/sqs: aws sdk: failed to discard remaining HTTP response body: EOF") {
		t.Fatalf("warning entry = %q", out)
	}

	buf.Reset()
	l = sdkLogger{slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	l.Logf(logging.Debug, "retrying request %s, attempt %d", "SQS/SendMessageBatch", 2)
	if out := buf.String(); !strings.Contains(out, "level=DEBUG") || !strings.Contains(out, "retrying request SQS/SendMessageBatch, attempt 2") {
		t.Fatalf("debug entry = %q", out)
	}
}
