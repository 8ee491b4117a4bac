package redisstream_test

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testenv"
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

// withParams returns base with the query parameters kv added.
func withParams(t testing.TB, base string, kv ...string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := relay.OpenPublisher(ctx, withParams(t, redisURL(t), kv...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func openSub(t testing.TB, group string, kv ...string) relay.Subscriber {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := relay.OpenSubscriber(ctx, withParams(t, redisURL(t), append([]string{"group", group}, kv...)...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// restartCommand is how the tests start the local Redis again (the
// development machine's and CI's command, or RELAY_TEST_REDIS_START).
func restartCommand() string {
	if c := os.Getenv("RELAY_TEST_REDIS_START"); c != "" {
		return c
	}
	return `redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log`
}

// canRestart reports why the test server cannot be restarted from here,
// or "" when it can: only the local default server, or any server when
// RELAY_TEST_REDIS_START says how to start it.
func canRestart(t testing.TB) string {
	if os.Getenv("RELAY_TEST_REDIS_START") != "" {
		return ""
	}
	if configuredURL() != testenv.DefaultRedisURL {
		return "RELAY_TEST_REDIS_URL names another server; set RELAY_TEST_REDIS_START to the command that starts it"
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		if testenv.Required() {
			t.Fatalf("redis-server is not installed, but CI must run the restart tests against the local Redis")
		}
		return "redis-server is not installed here"
	}
	return ""
}

// stopRedis shuts the test server down without saving. The server is
// started again at cleanup if the test did not do it.
func stopRedis(t testing.TB) {
	t.Helper()
	if why := canRestart(t); why != "" {
		t.Skipf("SKIP: cannot restart Redis: %s", why)
	}
	unlock := testenv.LockForRestart(t, "redis")
	t.Cleanup(func() {
		defer unlock()
		if !redisUp() {
			startRedis(t)
		}
	})
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

// startRedis starts the test server and waits until it answers PING.
func startRedis(t testing.TB) {
	t.Helper()
	out, err := exec.Command("sh", "-c", restartCommand()).CombinedOutput()
	if err != nil {
		t.Errorf("starting Redis (%s): %v: %s", restartCommand(), err, out)
		return
	}
	for i := 0; i < 200; i++ {
		if redisUp() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("Redis does not answer after %q", restartCommand())
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

// restartRedis stops and starts the test server (adaptertest's Restart hook).
func restartRedis(t testing.TB) {
	t.Helper()
	stopRedis(t)
	startRedis(t)
}
