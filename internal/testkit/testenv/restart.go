package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
)

// LocalBroker says how tests stop and start one of the brokers that the
// test processes of this module share. Stop takes the broker's restart
// lock (LockForRestart) and holds it until the test ends, so that no other
// test process finds the broker down or restarts it at the same time; at
// cleanup the broker is started again if the test left it down.
//
// The broker can be restarted when it is the local default one and Tool
// is installed, or when the environment says how to restart another one
// (StartEnv, and StopEnv where set). A missing Tool fails the test under
// CI (Required), and skips it otherwise.
type LocalBroker struct {
	Name string // the broker in messages: "Redis", "RabbitMQ"
	Lock string // its restart lock: "redis", "amqp"

	URLEnv     string // the environment variable naming the broker tests use
	DefaultURL string // the local broker, used when URLEnv is unset
	Tool       string // the program the default commands run

	StartEnv     string // the environment variable overriding DefaultStart
	DefaultStart string // sh command that starts the local broker
	StopEnv      string // the environment variable overriding DefaultStop ("" with StopFunc)
	DefaultStop  string // sh command that stops the local broker (unused with StopFunc)
	// StopFunc, when set, stops the broker instead of the stop command
	// (and can restart a broker that StartEnv alone says how to start).
	StopFunc func(t testing.TB)

	Up func() bool // whether the broker accepts clients now
	// After the start command, Start calls Up until it reports true, at
	// most StartPolls times, StartPollEvery apart.
	StartPolls     int
	StartPollEvery time.Duration
	UpWhat         string // what Up checks, in the message when it never does: "answer", "accept connections"
}

// URL is the broker the tests use, without a reachability check, for use
// while it is deliberately down.
func (b *LocalBroker) URL() string { return URL(b.URLEnv, b.DefaultURL) }

// StartCommand is the sh command that starts the broker.
func (b *LocalBroker) StartCommand() string { return envOr(b.StartEnv, b.DefaultStart) }

// StopCommand is the sh command that stops the broker (without StopFunc).
func (b *LocalBroker) StopCommand() string { return envOr(b.StopEnv, b.DefaultStop) }

func envOr(env, def string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	return def
}

// CanRestart reports why the broker cannot be restarted from here, or ""
// when it can. Under CI a missing Tool fails t instead.
func (b *LocalBroker) CanRestart(t testing.TB) string {
	t.Helper()
	overrides := b.StartEnv
	if b.StopEnv != "" {
		overrides = b.StopEnv + " and " + b.StartEnv
	}
	if os.Getenv(b.StartEnv) != "" && (b.StopEnv == "" || os.Getenv(b.StopEnv) != "") {
		return ""
	}
	if b.URL() != b.DefaultURL {
		return fmt.Sprintf("%s names another broker; set %s to restart it", b.URLEnv, overrides)
	}
	if _, err := exec.LookPath(b.Tool); err != nil {
		if Required() {
			t.Fatalf("%s is not installed, but CI must run the restart tests against the local %s", b.Tool, b.Name)
		}
		return b.Tool + " is not installed here"
	}
	return ""
}

// Stop stops the broker, holding its restart lock until t ends; the test
// is skipped (or fails, see CanRestart) when the broker cannot be
// restarted. The broker is started again at cleanup if the test did not
// do it.
func (b *LocalBroker) Stop(t testing.TB) {
	t.Helper()
	if why := b.CanRestart(t); why != "" {
		t.Skipf("SKIP: cannot restart %s: %s", b.Name, why)
	}
	unlock := LockForRestart(t, b.Lock)
	t.Cleanup(func() {
		defer unlock()
		if !b.Up() {
			b.Start(t)
		}
	})
	if b.StopFunc != nil {
		b.StopFunc(t)
		return
	}
	if out, err := exec.Command("sh", "-c", b.StopCommand()).CombinedOutput(); err != nil {
		t.Fatalf("stopping %s (%s): %v: %s", b.Name, b.StopCommand(), err, out)
	}
}

// Start starts the broker and waits until Up; a failure is reported with
// t.Errorf. Call it after Stop, within the same test.
func (b *LocalBroker) Start(t testing.TB) {
	t.Helper()
	if out, err := exec.Command("sh", "-c", b.StartCommand()).CombinedOutput(); err != nil {
		t.Errorf("starting %s (%s): %v: %s", b.Name, b.StartCommand(), err, out)
		return
	}
	for i := 0; i < b.StartPolls; i++ {
		if b.Up() {
			return
		}
		time.Sleep(b.StartPollEvery)
	}
	t.Errorf("%s does not %s after %q", b.Name, b.UpWhat, b.StartCommand())
}

// Restart stops and starts the broker (drivertest's Restart hook).
func (b *LocalBroker) Restart(t testing.TB) {
	t.Helper()
	b.Stop(t)
	b.Start(t)
}

// LocalRabbitMQ is the tests' RabbitMQ (RELAY_TEST_AMQP_URL, or the local
// one) for restarts: its application is stopped and started with
// rabbitmqctl, or with the sh commands in RELAY_TEST_AMQP_STOP and
// RELAY_TEST_AMQP_START. up tells whether it accepts AMQP connections.
func LocalRabbitMQ(up func() bool) *LocalBroker {
	return &LocalBroker{
		Name:           "RabbitMQ",
		Lock:           "amqp",
		URLEnv:         "RELAY_TEST_AMQP_URL",
		DefaultURL:     DefaultAMQPURL,
		Tool:           "rabbitmqctl",
		StartEnv:       "RELAY_TEST_AMQP_START",
		DefaultStart:   "rabbitmqctl start_app && rabbitmqctl await_startup",
		StopEnv:        "RELAY_TEST_AMQP_STOP",
		DefaultStop:    "rabbitmqctl stop_app",
		Up:             up,
		StartPolls:     300,
		StartPollEvery: 100 * time.Millisecond,
		UpWhat:         "accept connections",
	}
}

// LocalRedis is the tests' Redis (RELAY_TEST_REDIS_URL, or the local one)
// for restarts: stop shuts it down (SHUTDOWN NOSAVE, through a client),
// and it is started with the development machine's and CI's redis-server
// command, or the sh command in RELAY_TEST_REDIS_START. up tells whether
// it answers PING.
func LocalRedis(up func() bool, stop func(testing.TB)) *LocalBroker {
	return &LocalBroker{
		Name:           "Redis",
		Lock:           "redis",
		URLEnv:         "RELAY_TEST_REDIS_URL",
		DefaultURL:     DefaultRedisURL,
		Tool:           "redis-server",
		StartEnv:       "RELAY_TEST_REDIS_START",
		DefaultStart:   `redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log`,
		StopFunc:       stop,
		Up:             up,
		StartPolls:     200,
		StartPollEvery: 50 * time.Millisecond,
		UpWhat:         "answer",
	}
}

// pgCluster is the sh expression naming the local cluster's version (the
// newest under /etc/postgresql, as scripts/test.sh picks it).
const pgCluster = `$(ls /etc/postgresql | sort -V | tail -n 1) main`

// LocalPostgres is the tests' PostgreSQL (RELAY_TEST_POSTGRES_URL, or the
// local one) for restarts: the local cluster is stopped (fast shutdown:
// sessions are ended) and started with pg_ctlcluster, or with the sh
// commands in RELAY_TEST_POSTGRES_STOP and RELAY_TEST_POSTGRES_START. up
// tells whether it accepts queries.
func LocalPostgres(up func() bool) *LocalBroker {
	return &LocalBroker{
		Name:           "PostgreSQL",
		Lock:           "postgres",
		URLEnv:         "RELAY_TEST_POSTGRES_URL",
		DefaultURL:     DefaultPostgresURL,
		Tool:           "pg_ctlcluster",
		StartEnv:       "RELAY_TEST_POSTGRES_START",
		DefaultStart:   "pg_ctlcluster --skip-systemctl-redirect " + pgCluster + " start",
		StopEnv:        "RELAY_TEST_POSTGRES_STOP",
		DefaultStop:    "pg_ctlcluster --skip-systemctl-redirect " + pgCluster + " stop -m fast",
		Up:             up,
		StartPolls:     300,
		StartPollEvery: 100 * time.Millisecond,
		UpWhat:         "accept queries",
	}
}
