//go:build faults

package faults

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/go-relay/relay/internal/testkit/testenv"
)

// restartScenario publishes restartTotal messages in batches while a
// consumer acks them, restarts the broker once a third are published (the
// publisher goes on publishing through the outage, its Publish calls
// waiting for the reconnect), and then reconciles.
const restartTotal = 3000

func restartScenario(t *testing.T, adapter, pubURL, subURL string, restart func(t *testing.T)) {
	start := time.Now()
	topic := unique("faults-restart")
	l := newLedger()
	sub := openSub(t, subURL)
	provision(t, sub, topic)
	pub := openPub(t, pubURL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	consume(l, ch, &wg)

	third := make(chan struct{})
	var once sync.Once
	msgs := batchOf(restartTotal, 64, adapter)
	var failures int
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		failures = publishAll(t, l, pub, topic, msgs, 10, func(done int) {
			if done >= restartTotal/3 {
				once.Do(func() { close(third) })
			}
			time.Sleep(2 * time.Millisecond) // keep the stream going while the broker restarts
		})
	}()
	<-third
	restart(t)
	<-pubDone
	l.waitAll(90 * time.Second)
	cancel()
	_ = sub.Close()
	wg.Wait()
	note := "broker restarted after 1/3 published"
	if failures > 0 {
		note += "; " + strconv.Itoa(failures) + " Publish calls failed and were retried"
	}
	record(t, l.result(t, "broker restart", adapter, note), start)
}

// Redis runs without persistence on this machine (--save "" --appendonly
// no), so a plain restart empties it: no client can survive that. The
// scenario restarts it the way a persistent deployment does: SHUTDOWN SAVE
// writes an RDB snapshot, the same server command starts it again and
// loads it; the snapshot file is removed afterwards so the other tests'
// no-persistence restarts stay as they were.
func TestRestartRedis(t *testing.T) {
	base := redisURL(t)
	if testenv.URL("RELAY_TEST_REDIS_URL", "") != "" {
		t.Skip("SKIP: RELAY_TEST_REDIS_URL names an external server; only the local one is restarted")
	}
	restartScenario(t, "redisstream", base, testenv.WithParams(base, "group", unique("g"), "inflight", "64"), func(t *testing.T) {
		unlock := testenv.LockForRestart(t, "redis")
		defer unlock()
		opts, _ := redis.ParseURL(base)
		c := redis.NewClient(opts)
		dir, err := c.ConfigGet(context.Background(), "dir").Result()
		if err != nil {
			t.Fatal(err)
		}
		_ = c.ShutdownSave(context.Background()).Err() // the connection drops; the error is expected
		_ = c.Close()
		waitPort(t, "127.0.0.1:6379", false)
		// Redis stops listening before its snapshot is written; a server
		// started before the old one exited comes back empty (seen after
		// the backlog scenario left 100 MB of streams). Wait for the exit.
		deadline := time.Now().Add(2 * time.Minute)
		for exec.Command("pgrep", "-x", "redis-server").Run() == nil {
			if time.Now().After(deadline) {
				t.Fatal("redis-server still running 2 minutes after SHUTDOWN SAVE")
			}
			time.Sleep(100 * time.Millisecond)
		}
		cmd := `redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log`
		if out, err := exec.Command("sh", "-c", cmd).CombinedOutput(); err != nil {
			t.Fatalf("starting Redis: %v: %s", err, out)
		}
		// Redis listens before it has read the snapshot (clients get
		// LOADING meanwhile), so an open port is not enough: removing the
		// file then can beat the load, and the server comes back empty.
		// Wait until it answers PING.
		waitRedisLoaded(t, opts)
		for dir := range map[string]bool{dir["dir"]: true, "/var/lib/redis": true} {
			if dir != "" {
				_ = os.Remove(dir + "/dump.rdb")
			}
		}
	})
}

// waitRedisLoaded waits until the server at opts answers PING, which it
// does only once it has loaded its dataset.
func waitRedisLoaded(t *testing.T, opts *redis.Options) {
	t.Helper()
	c := redis.NewClient(opts)
	defer c.Close()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis did not answer PING within 2 minutes of its restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// RabbitMQ keeps durable queues and persistent messages across
// stop_app/start_app, which is what the scenario does.
func TestRestartRabbitMQ(t *testing.T) {
	base := amqpURL(t)
	if testenv.URL("RELAY_TEST_AMQP_URL", "") != "" {
		t.Skip("SKIP: RELAY_TEST_AMQP_URL names an external broker; only the local one is restarted")
	}
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		t.Skip("SKIP: rabbitmqctl not installed")
	}
	restartScenario(t, "amqp", base, testenv.WithParams(base, "group", unique("g"), "inflight", "64"), func(t *testing.T) {
		unlock := testenv.LockForRestart(t, "amqp")
		defer unlock()
		run := func(args ...string) {
			if out, err := exec.Command("rabbitmqctl", args...).CombinedOutput(); err != nil {
				t.Errorf("rabbitmqctl %s: %v: %s", strings.Join(args, " "), err, out)
			}
		}
		run("stop_app")
		time.Sleep(time.Second)
		run("start_app")
		run("await_startup")
		waitPort(t, "127.0.0.1:5672", true)
	})
}

// kfake is stopped and a new one started on the same address and data
// directory, so records and committed offsets survive as on a real broker.
func TestRestartKafka(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(port), kfake.DataDir(t.TempDir()),
		kfake.GroupMinSessionTimeout(100 * time.Millisecond)}
	var mu sync.Mutex
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mu.Lock(); c.Close(); mu.Unlock() })
	base := "kafka://127.0.0.1:" + strconv.Itoa(port)
	restartScenario(t, "kafka (kfake)", base, testenv.WithParams(base, "group", unique("g"), "inflight", "64"), func(t *testing.T) {
		mu.Lock()
		defer mu.Unlock()
		c.Close()
		time.Sleep(time.Second)
		nc, err := kfake.NewCluster(opts...)
		if err != nil {
			t.Fatalf("restarting kfake: %v", err)
		}
		c = nc
	})
}

// waitPort waits up to 60s for addr to accept (up) or refuse (!up).
func waitPort(t *testing.T, addr string, up bool) {
	t.Helper()
	for i := 0; i < 600; i++ {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
		}
		if (err == nil) == up {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not become up=%v within 60s", addr, up)
}
