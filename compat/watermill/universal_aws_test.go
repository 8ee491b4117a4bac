package watermill_test

import (
	"net/url"
	"os"
	"testing"

	_ "github.com/go-relay/relay/adapters/sqs"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// awsBase returns the sqs:// or sns:// URL of the service the universal
// suite runs against on those schemes, or skips: the suite takes a
// minute per scheme on goaws, too long for make test's budget, so it runs
// only when RELAY_TEST_WATERMILL_AWS=1 names it, against the service of
// RELAY_TEST_SQS_ENDPOINT (a URL, or "aws" for AWS itself; required then).
// An emulator is reached through testenv.GoawsGuard (goaws dies when a
// topic or queue is created beside other calls), with static credentials,
// on sns:// queue_policy=false (goaws cannot set queue policies), and
// polls of at most a second (wait=1s: a poll cut short by the end of a
// subscription can take a message until goaws notices): see
// docs/watermill.md.
func awsBase(t *testing.T, scheme string) string {
	if os.Getenv("RELAY_TEST_WATERMILL_AWS") != "1" {
		t.Skip("SKIP: set RELAY_TEST_WATERMILL_AWS=1 and RELAY_TEST_SQS_ENDPOINT to run Watermill's suite on " + scheme + ":// (about a minute; see docs/watermill.md)")
	}
	ep := os.Getenv("RELAY_TEST_SQS_ENDPOINT")
	if ep == "" {
		t.Fatal("RELAY_TEST_WATERMILL_AWS=1 needs RELAY_TEST_SQS_ENDPOINT: an emulator's URL, or aws")
	}
	q := url.Values{}
	q.Set("region", testenv.URL("RELAY_TEST_AWS_REGION", testenv.DefaultAWSRegion))
	if ep != "aws" {
		q.Set("endpoint", testenv.GoawsGuard(t, ep))
		q.Set("access_key_id", "test")
		q.Set("secret_key", "test")
		q.Set("wait", "1s")
		if scheme == "sns" {
			q.Set("queue_policy", "false")
		}
	}
	return scheme + "://?" + q.Encode()
}

// TestUniversalSQS runs Watermill's universal suite on sqs:// (the queue
// is the group, so without ConsumerGroups).
func TestUniversalSQS(t *testing.T) { runUniversal(t, awsBase(t, "sqs")) }

// TestUniversalSNS runs Watermill's universal suite on sns://.
func TestUniversalSNS(t *testing.T) { runUniversal(t, awsBase(t, "sns")) }
