package sqs_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	relaysqs "github.com/go-relay/relay/adapters/sqs"
	"github.com/go-relay/relay/internal/testkit/relaytest"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// The service (goaws v0.5.4 as a subprocess, unless RELAY_TEST_SQS_ENDPOINT
// points elsewhere) is started on first use and stopped after the tests.
var (
	svcOnce sync.Once
	svc     *testenv.SQSService
)

func TestMain(m *testing.M) {
	code := m.Run()
	if svc != nil {
		svc.Stop()
	}
	if code == 0 {
		if err := goleak.Find(testenv.ProxyGoroutines()...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func service(t testing.TB) *testenv.SQSService {
	t.Helper()
	svcOnce.Do(func() { svc = testenv.StartSQS() })
	svc.Need(t)
	return svc
}

// baseURL is the sqs:// or sns:// URL of the test service with extra
// parameters ("k=v"). Against goaws it carries static credentials and,
// for sns://, queue_policy=false: goaws cannot set queue policies.
func baseURL(t testing.TB, scheme string, extra ...string) string {
	s := service(t)
	q := url.Values{}
	q.Set("region", s.Region)
	if s.Endpoint != "" {
		q.Set("endpoint", s.Endpoint)
	}
	if s.Emulated {
		q.Set("access_key_id", "test")
		q.Set("secret_key", "test")
		if scheme == relaysqs.SchemeSNS {
			q.Set("queue_policy", "false")
		}
	}
	for _, kv := range extra {
		k, v, _ := strings.Cut(kv, "=")
		q.Set(k, v)
	}
	return scheme + "://?" + q.Encode()
}

// name returns a fresh queue or topic name; every test resource starts
// with "relay-test-", so a run against AWS is easy to clean up after.
func name(prefix string) string {
	id := strings.ReplaceAll(relay.NewID(), "-", "")
	return "relay-test-" + prefix + "-" + id[len(id)-12:]
}

// provision is relaytest.Provision for the subscribers openSub returns.
func provision(t testing.TB, s relay.Subscriber, topic string) {
	t.Helper()
	relaytest.Provision(t, s.(relay.Provisioner), topic)
}

// subscribe is relaytest.Subscribe for tests that end the subscription
// only at cleanup.
func subscribe(t testing.TB, s relay.Subscriber, topic string) <-chan *relay.Message {
	t.Helper()
	ch, _ := relaytest.Subscribe(t, s, topic)
	return ch
}

// rawClients are plain SDK clients of the test service, for checking what
// is on the wire and for playing a foreign producer.
func rawClients(t testing.TB, rt http.RoundTripper) (*sqs.Client, *sns.Client) {
	t.Helper()
	s := service(t)
	opts := []func(*config.LoadOptions) error{config.WithRegion(s.Region)}
	if s.Emulated {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")))
	}
	cfg, err := config.LoadDefaultConfig(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	t.Cleanup(tr.CloseIdleConnections)
	if rt == nil {
		rt = tr
	}
	cfg.HTTPClient = &http.Client{Transport: rt}
	q := sqs.NewFromConfig(cfg, func(o *sqs.Options) {
		if s.Endpoint != "" {
			o.BaseEndpoint = aws.String(s.Endpoint)
		}
	})
	n := sns.NewFromConfig(cfg, func(o *sns.Options) {
		if s.Endpoint != "" {
			o.BaseEndpoint = aws.String(s.Endpoint)
		}
	})
	return q, n
}

// callCounter counts HTTP calls per AWS action.
type callCounter struct {
	next  http.RoundTripper
	mu    sync.Mutex
	calls map[string]int
	total atomic.Int64
}

func newCallCounter(next http.RoundTripper) *callCounter {
	return &callCounter{next: next, calls: map[string]int{}}
}

func (c *callCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	action := req.Header.Get("X-Amz-Target") // SQS JSON protocol: "AmazonSQS.SendMessageBatch"
	if i := strings.LastIndexByte(action, '.'); i >= 0 {
		action = action[i+1:]
	}
	if action == "" {
		action = "query" // SNS query protocol (action in the form body)
	}
	c.mu.Lock()
	c.calls[action]++
	c.mu.Unlock()
	c.total.Add(1)
	return c.next.RoundTrip(req)
}

func (c *callCounter) count(action string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[action]
}

func (c *callCounter) reset() {
	c.mu.Lock()
	clear(c.calls)
	c.mu.Unlock()
	c.total.Store(0)
}

func (c *callCounter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprint(c.calls)
}
