//go:build faults

package faults

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/testenv"
	"github.com/go-relay/relay/middleware"
	"github.com/go-relay/relay/router"
)

// routerScenario runs a router handler over routerTotal good messages and
// three bad ones: one whose handler panics, one whose handler hangs past
// its Timeout, one whose handler fails every time. The chain is
// PoisonQueue → Retry (3 attempts) → Timeout (300ms) → Recoverer →
// handler. Reconciliation: every good ID handled, every bad ID on the
// poison topic with the reason, nothing else; the good ones flow while the
// bad ones are retried.
const routerTotal = 1000

func routerScenario(t *testing.T, adapter, pubURL string, subURL func(group string) string) {
	start := time.Now()
	topic := unique("faults-router")
	poisonTopic := topic + ".poison"
	l := newLedger()

	sub := openSub(t, subURL(unique("g")))
	provision(t, sub, topic)
	poisonSub := openSub(t, subURL(unique("gp")))
	provision(t, poisonSub, poisonTopic)
	pub := openPub(t, pubURL)

	msgs := batchOf(routerTotal, 64, adapter)
	bad := map[string]string{} // ID → behaviour
	for _, kind := range []string{"panic", "hang", "fail"} {
		m := relay.NewMessage([]byte(kind))
		m.Metadata = relay.Metadata{"behaviour": kind}
		bad[m.ID] = kind
		// spread the bad ones through the stream
		at := len(msgs) / 4 * (len(bad))
		msgs = append(msgs[:at], append([]*relay.Message{m}, msgs[at:]...)...)
	}

	poison, err := middleware.PoisonQueue(middleware.PoisonConfig{Publisher: pub, Topic: poisonTopic})
	if err != nil {
		t.Fatal(err)
	}
	retry, err := middleware.Retry(middleware.RetryConfig{MaxAttempts: 3, InitialInterval: 10 * time.Millisecond, MaxInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var runsMu sync.Mutex
	runs := map[string]int{}
	h := func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
		switch m.Metadata["behaviour"] {
		case "panic":
			panic("faults: handler panics on purpose")
		case "hang":
			<-ctx.Done() // hangs until Timeout cancels it
			return nil, ctx.Err()
		case "fail":
			return nil, io.ErrUnexpectedEOF
		}
		runsMu.Lock()
		runs[m.ID]++
		runsMu.Unlock()
		l.receive(m.ID)
		return nil, nil
	}
	r, err := router.New(router.Config{
		CloseTimeout:    10 * time.Second,
		RedeliveryDelay: router.NoRedeliveryDelay,
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.AddHandler("faults", sub, topic, h, router.WithConcurrency(8),
		router.WithMiddleware(poison, retry, middleware.Timeout(300*time.Millisecond), middleware.Recoverer)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- r.Run(ctx) }()
	<-r.Running()

	pctx, pcancel := context.WithCancel(context.Background())
	defer pcancel()
	pch, err := poisonSub.Subscribe(pctx, poisonTopic)
	if err != nil {
		t.Fatal(err)
	}
	var reasonsMu sync.Mutex
	reasons := map[string]string{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m := range pch {
			reasonsMu.Lock()
			// The copy has its own ID; the ledger counts the original.
			orig := m.Metadata[middleware.PoisonOriginalIDKey]
			reasons[orig] = m.Metadata[middleware.PoisonReasonKey]
			reasonsMu.Unlock()
			l.receive(orig)
			_ = m.Ack()
		}
	}()

	publishAll(t, l, pub, topic, msgs, 50, nil)
	l.waitAll(90 * time.Second)
	cancel()
	if err := <-runErr; err != nil {
		t.Errorf("router Run: %v", err)
	}
	pcancel()
	_ = poisonSub.Close()
	wg.Wait()

	reasonsMu.Lock()
	for id, kind := range bad {
		reason, ok := reasons[id]
		want := map[string]string{"panic": "panic", "hang": "deadline", "fail": "unexpected EOF"}[kind]
		if ok && !strings.Contains(reason, want) {
			t.Errorf("%s message poisoned with reason %q, want it to mention %q", kind, reason, want)
		}
	}
	reasonsMu.Unlock()
	res := l.result(t, "router: panic, hang, always-fail", adapter,
		"3 bad of "+strconv.Itoa(len(msgs))+" poisoned after 3 attempts; received = handled + poisoned")
	record(t, res, start)
}

func TestRouterMemory(t *testing.T) {
	name := unique("faults")
	routerScenario(t, "memory", "mem://"+name, func(g string) string { return "mem://" + name + "?group=" + g })
}

func TestRouterRedis(t *testing.T) {
	base := redisURL(t)
	routerScenario(t, "redisstream", base, func(g string) string { return testenv.WithParams(base, "group", g) })
}

func TestRouterRabbitMQ(t *testing.T) {
	base := amqpURL(t)
	routerScenario(t, "amqp", base, func(g string) string { return testenv.WithParams(base, "group", g) })
}
