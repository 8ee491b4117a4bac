package redislist_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver/drivertest"
	_ "github.com/go-relay/relay/examples/adapter/redislist"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testURL returns the base redislist:// URL of the test server with a key
// prefix unique to this test, whose keys are deleted when t ends. The
// server comes from RELAY_TEST_REDIS_URL (default redis://127.0.0.1:6379/0);
// when it is unreachable the test fails under CI=true or
// RELAY_REQUIRE_BROKERS=1 and is skipped with the reason otherwise.
func testURL(t *testing.T) string {
	t.Helper()
	raw := os.Getenv("RELAY_TEST_REDIS_URL")
	if raw == "" {
		raw = "redis://127.0.0.1:6379/0"
	}
	opts, err := redis.ParseURL(raw)
	if err != nil {
		t.Fatalf("RELAY_TEST_REDIS_URL: %v", err)
	}
	rc := redis.NewClient(opts)
	t.Cleanup(func() { _ = rc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rc.Ping(ctx).Err(); err != nil {
		why := fmt.Sprintf("Redis at %s is unreachable (%v); start it or set RELAY_TEST_REDIS_URL", opts.Addr, err)
		if os.Getenv("CI") == "true" || os.Getenv("RELAY_REQUIRE_BROKERS") == "1" {
			t.Fatal(why)
		}
		t.Skip("SKIP: " + why)
	}
	prefix := "relaytest:" + strings.ReplaceAll(relay.NewID(), "-", "") + ":"
	t.Cleanup(func() { deleteKeys(t, rc, prefix) })
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Scheme = "redislist"
	u.RawQuery = url.Values{"prefix": {prefix}}.Encode()
	return u.String()
}

func deleteKeys(t *testing.T, rc *redis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iter := rc.Scan(ctx, 0, prefix+"*", 500).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("listing the test's keys: %v", err)
		return
	}
	if len(batch) > 0 {
		if err := rc.Del(ctx, batch...).Err(); err != nil {
			t.Errorf("deleting %d test keys: %v", len(batch), err)
		}
	}
}

func withGroup(t testing.TB, base, group string) string {
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("group", group)
	u.RawQuery = q.Encode()
	return u.String()
}

func TestConformance(t *testing.T) {
	base := testURL(t)
	drivertest.Run(t, drivertest.Harness{
		NewPublisher: func(t testing.TB) relay.Publisher {
			p, err := relay.OpenPublisher(context.Background(), base)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		NewSubscriber: func(t testing.TB, group string) relay.Subscriber {
			s, err := relay.OpenSubscriber(context.Background(), withGroup(t, base, group))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		PublisherURL:   base,
		SubscriberURL:  func(group string) string { return withGroup(t, base, group) },
		HungBrokerSkip: "the fault proxy lives in relay's internal/testkit/testenv, which a module outside relay cannot import",
	})
}
