package redisstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// redisURL is the server the tests use (RELAY_TEST_REDIS_URL or the local
// one); the test fails (CI) or skips when it is unreachable.
func redisURL(t testing.TB) string {
	t.Helper()
	return testenv.Redis(t)
}

// configuredURL is the test server's URL without the reachability check,
// for use while the server is deliberately down.
func configuredURL() string { return testenv.URL("RELAY_TEST_REDIS_URL", testenv.DefaultRedisURL) }

// rawClient is a plain go-redis client on the test server, closed at cleanup.
func rawClient(t testing.TB) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(redisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func openPub(t testing.TB, kv ...string) relay.Publisher {
	t.Helper()
	return relaytest.OpenPublisher(t, testenv.WithParams(redisURL(t), kv...))
}

func openSub(t testing.TB, group string, kv ...string) relay.Subscriber {
	t.Helper()
	return relaytest.OpenSubscriber(t, testenv.WithParams(redisURL(t), append([]string{"group", group}, kv...)...))
}

// local is the test server for restarts: it is stopped with SHUTDOWN
// NOSAVE and started with the development machine's and CI's command (or
// RELAY_TEST_REDIS_START).
var local = testenv.LocalRedis(redisUp, shutdownRedis)

// canRestart reports why the test server cannot be restarted from here
// (see testenv.LocalBroker); stopRedis stops it until startRedis (or the
// test's cleanup) starts it again; restartRedis is drivertest's Restart
// hook.
var (
	canRestart   = local.CanRestart
	stopRedis    = local.Stop
	startRedis   = local.Start
	restartRedis = local.Restart
)

// shutdownRedis shuts the test server down without saving and waits
// until it no longer answers.
func shutdownRedis(t testing.TB) {
	t.Helper()
	c := rawClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.ShutdownNoSave(ctx).Err() // the connection drops; the error is expected
	for i := 0; i < 100 && redisUp(); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	if redisUp() {
		t.Fatal("Redis still answers after SHUTDOWN NOSAVE")
	}
}

func redisUp() bool {
	opts, err := redis.ParseURL(configuredURL())
	if err != nil {
		return false
	}
	opts.MaxRetries = -1
	opts.DialTimeout = time.Second
	c := redis.NewClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.Ping(ctx).Err() == nil
}
