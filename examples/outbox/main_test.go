package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestOutboxToRedis: the three saved orders' events reach the Redis
// consumer through the forwarder, each once; the duplicate order's
// transaction rolled back and its event was never forwarded.
func TestOutboxToRedis(t *testing.T) {
	db, broker := testenv.Postgres(t), testenv.Redis(t)
	id := strings.ReplaceAll(relay.NewID(), "-", "")
	schema, topic := "relay_test_outbox_"+id[20:], "outbox-example-"+id[20:]
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, db); err == nil {
			_, _ = c.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			_ = c.Close(ctx)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, db, broker, schema, topic); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, o := range []string{"A-1001", "A-1002", "A-1003"} {
		if n := strings.Count(got, "consumer: order placed: "+o+","); n != 1 {
			t.Errorf("order %s printed %d times by the consumer, want 1\n%s", o, n, got)
		}
	}
	if n := strings.Count(got, "forwarder: postgres → "); n != 3 {
		t.Errorf("%d events forwarded, want 3\n%s", n, got)
	}
	if !strings.Contains(got, "order A-1001 rejected, transaction rolled back") {
		t.Errorf("the duplicate order was not rolled back\n%s", got)
	}
}

// -broker and -db take their default from the environment, as in every example.
func TestURLFlags(t *testing.T) {
	testenv.CheckEnvFlag(t, "broker", "redis://127.0.0.1:6379/0", brokerFlag)
	testenv.CheckEnvFlag(t, "db", "postgres://postgres@127.0.0.1:5432/test", dbFlag)
}
