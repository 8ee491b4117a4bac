package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/go-relay/relay/bridge"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestWalkThrough runs the whole migration on the local RabbitMQ and a
// Kafka cluster (RELAY_TEST_KAFKA_BROKERS, or kfake in process).
func TestWalkThrough(t *testing.T) {
	holdRabbit(t)
	rabbit := testenv.AMQP(t)
	brokers := testenv.KafkaBrokers(t)
	if brokers == nil {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(3))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		brokers = c.ListenAddrs()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := run(ctx, &out, rabbit, "kafka://"+brokers[0], 5)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"5 orders published on rabbitmq → billing@rabbitmq 5/5, shipping@rabbitmq 5/5",
		"5 orders published on rabbitmq → billing@rabbitmq 10/10, shipping@kafka 10/10",
		"5 orders published on kafka → billing@rabbitmq 15/15, shipping@kafka 15/15",
		"5 orders published on rabbitmq (straggler) → billing@rabbitmq 20/20, shipping@kafka 20/20",
		"5 orders published on kafka → billing@kafka 25/25, shipping@kafka 25/25",
		"OK: every service handled every order exactly once",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestConfigsValidate checks the walk-through's configs as `relay
// validate` would, with the variables the README sets.
func TestConfigsValidate(t *testing.T) {
	env := func(k string) (string, bool) {
		v, ok := map[string]string{"RABBIT_URL": "amqp://relay:secret@rabbit:5672/", "KAFKA_URL": "kafka://kafka:9092"}[k]
		return v, ok
	}
	for _, f := range []string{"phase1.yaml", "phase2.yaml"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := bridge.Parse(data, f, env)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if cfg.Routes[0].From.Topic != "orders" || cfg.HTTP.Address != "127.0.0.1:9470" {
			t.Errorf("%s: %+v", f, cfg)
		}
	}
}

// holdRabbit holds off restarts of the shared RabbitMQ by other packages'
// tests while the walk-through runs (see testenv.HoldBroker).
func holdRabbit(t *testing.T) { testenv.HoldBroker(t, "amqp") }

// TestKafkaUnreachable: with Kafka down (a closed port) or not answering (a
// proxy that drops all traffic), the walk-through says at once, before
// phase 0, that Kafka is unreachable and how to fix it, instead of waiting
// out -timeout with a bridge that cannot connect.
func TestKafkaUnreachable(t *testing.T) {
	holdRabbit(t)
	rabbit := testenv.AMQP(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hung := testenv.NewFaultProxy(t, c.ListenAddrs()[0])
	hung.Hang()
	defer hung.Restore()
	for _, kafka := range []string{"kafka://127.0.0.1:1", "kafka://" + hung.Addr()} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		var out bytes.Buffer
		err := run(ctx, &out, rabbit, kafka, 5)
		expired := ctx.Err()
		cancel()
		if err == nil || !strings.Contains(err.Error(), "Kafka is unreachable at "+kafka) || !strings.Contains(err.Error(), "-kafka") {
			t.Errorf("%s: err = %v, want Kafka named unreachable", kafka, err)
		}
		if expired != nil {
			t.Errorf("%s: run returned only when its context expired", kafka)
		}
		if strings.Contains(out.String(), "phase 0") {
			t.Errorf("%s: the walk-through started before Kafka was checked:\n%s", kafka, out.String())
		}
	}
}

// -rabbit and -kafka take their default from the environment, as in every example.
func TestURLFlags(t *testing.T) {
	testenv.CheckEnvFlag(t, "rabbit", "amqp://guest:guest@127.0.0.1:5672/", rabbitFlag)
	testenv.CheckEnvFlag(t, "kafka", "kafka://127.0.0.1:9092", kafkaFlag)
}
