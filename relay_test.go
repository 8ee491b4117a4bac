package relay_test

import (
	"context"
	"errors"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

func TestNewIDIsUUIDv7AndIncreasing(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	prev := ""
	seen := map[string]bool{}
	for i := 0; i < 20000; i++ {
		id := relay.NewID()
		if !re.MatchString(id) {
			t.Fatalf("%q is not a canonical UUIDv7", id)
		}
		if id <= prev {
			t.Fatalf("IDs not increasing: %q after %q", id, prev)
		}
		if seen[id] {
			t.Fatalf("duplicate ID %q", id)
		}
		seen[id] = true
		prev = id
	}
}

// An ID's timestamp is the wall clock's Unix milliseconds when it was
// made (NewID reads a monotonic clock anchored to the wall clock). The
// upper bound allows for milliseconds borrowed by a burst of earlier IDs.
func TestNewIDTimestampIsWallClock(t *testing.T) {
	for i := 0; i < 100; i++ {
		before := time.Now().UnixMilli()
		id := relay.NewID()
		after := time.Now().UnixMilli()
		ts, err := strconv.ParseInt(strings.ReplaceAll(id[:13], "-", ""), 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		if ts < before || ts > after+1000 {
			t.Fatalf("ID %s has timestamp %d, made between %d and %d", id, ts, before, after)
		}
	}
}

// The 62 random bits of every ID are fresh, also across the blocks of
// randomness NewID reads ahead.
func TestNewIDRandomBitsFresh(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		r := relay.NewID()[20:] // after the variant nibble
		if seen[r] {
			t.Fatalf("random bits %s repeated in ID %d", r, i)
		}
		seen[r] = true
	}
}

func TestNewIDConcurrentUnique(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				id := relay.NewID()
				mu.Lock()
				if seen[id] {
					t.Errorf("duplicate %s", id)
				}
				seen[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

func delivered(settle func(driver.Settlement) error) *relay.Message {
	return driver.Deliver(relay.NewMessage([]byte("x")), driver.DeliveryParams{Topic: "t", Attempt: 3, Ctx: context.Background(), Settle: settle})
}

func TestSettlementRules(t *testing.T) {
	var calls []driver.Settlement
	m := delivered(func(s driver.Settlement) error { calls = append(calls, s); return nil })
	if m.Topic() != "t" || m.Attempt() != 3 {
		t.Fatalf("Topic/Attempt = %q/%d", m.Topic(), m.Attempt())
	}
	if err := m.Nack(); err != nil {
		t.Fatal(err)
	}
	if err := m.Nack(); err != nil {
		t.Fatalf("second Nack: %v", err)
	}
	if err := m.Ack(); !errors.Is(err, relay.ErrAlreadySettled) {
		t.Fatalf("Ack after Nack = %v", err)
	}
	if len(calls) != 1 || calls[0].Ack {
		t.Fatalf("settle callback calls %+v, want one Nack", calls)
	}
	if m.Context().Err() == nil || !m.Settled() {
		t.Fatal("context not done / not settled after Nack")
	}
}

func TestSettleErrorKeepsMessageOpen(t *testing.T) {
	fail := true
	m := delivered(func(driver.Settlement) error {
		if fail {
			return relay.ErrSubscriptionEnded
		}
		return nil
	})
	if err := m.Ack(); !errors.Is(err, relay.ErrSubscriptionEnded) {
		t.Fatalf("Ack = %v", err)
	}
	if m.Settled() || m.Context().Err() != nil {
		t.Fatal("failed settlement changed the message state")
	}
	fail = false
	if err := m.Nack(); err != nil {
		t.Fatalf("Nack after failed Ack = %v", err)
	}
}

func TestNackAfterPassesDelay(t *testing.T) {
	var got driver.Settlement
	m := delivered(func(s driver.Settlement) error { got = s; return nil })
	if err := m.NackAfter(1500); err != nil {
		t.Fatal(err)
	}
	if got.Ack || got.Delay != 1500 {
		t.Fatalf("settlement %+v", got)
	}
}

func TestUndeliveredMessage(t *testing.T) {
	m := relay.NewMessage([]byte("p"))
	if m.Attempt() != 0 || m.Topic() != "" || m.Context() == nil {
		t.Fatal("undelivered message has delivery state")
	}
	if err := m.Ack(); err != nil {
		t.Fatalf("Ack on an undelivered message = %v, want nil", err)
	}
	c := m.Copy()
	c.Payload[0] = 'q'
	if m.Payload[0] != 'p' || c.ID != m.ID {
		t.Fatal("Copy shares the payload or changes the ID")
	}
}

func TestUnknownScheme(t *testing.T) {
	_, err := relay.OpenPublisher(context.Background(), "nosuch://host")
	if !errors.Is(err, relay.ErrUnknownScheme) {
		t.Fatalf("err = %v", err)
	}
	_, err = relay.OpenSubscriber(context.Background(), "no-scheme-here")
	if !errors.Is(err, relay.ErrBadURL) {
		t.Fatalf("err = %v", err)
	}
}

type fakeOpener struct{}

func (fakeOpener) OpenPublisher(context.Context, *url.URL) (relay.Publisher, error) {
	return nil, errors.New("publisher")
}
func (fakeOpener) OpenSubscriber(context.Context, *url.URL) (relay.Subscriber, error) {
	return nil, errors.New("subscriber")
}

func TestRegisterTwicePanics(t *testing.T) {
	relay.Register("fake-twice", fakeOpener{})
	defer func() {
		if recover() == nil {
			t.Fatal("no panic on duplicate Register")
		}
	}()
	relay.Register("FAKE-twice", fakeOpener{})
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"amqp://guest:s3cret@host:5672/vh":            "amqp://guest:xxxxx@host:5672/vh",
		"kafka://h:9092?sasl_user=u&sasl_password=pw": "kafka://h:9092?sasl_password=xxxxx&sasl_user=u",
		"redis://h:6379/0":                            "redis://h:6379/0",
	} {
		if got := relay.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
		if strings.Contains(relay.Redact(in), "s3cret") || strings.Contains(relay.Redact(in), "=pw") {
			t.Errorf("secret left in %q", relay.Redact(in))
		}
	}
}

func TestErrorsMatch(t *testing.T) {
	le := &relay.LimitError{MessageID: "m", What: "payload", Limit: 1, Actual: 2}
	if !errors.Is(le, relay.ErrMessageTooLarge) || !errors.Is(le, relay.ErrLimit) {
		t.Fatal("payload LimitError does not match its sentinels")
	}
	if errors.Is(&relay.LimitError{What: "topic", Detail: "bad char"}, relay.ErrMessageTooLarge) {
		t.Fatal("topic LimitError matches ErrMessageTooLarge")
	}
	pe := &relay.PublishError{Failed: []relay.MessageFailure{{ID: "a", Err: relay.ErrClosed}, {ID: "b", Err: le}}}
	if !errors.Is(pe, relay.ErrClosed) || !errors.Is(pe, relay.ErrMessageTooLarge) {
		t.Fatal("PublishError does not unwrap its failures")
	}
	if got := pe.FailedIDs(); len(got) != 2 || got[0] != "a" {
		t.Fatalf("FailedIDs = %v", got)
	}
	p := relay.Permanent(errors.New("bad input"))
	if !relay.IsPermanent(p) || relay.IsPermanent(errors.New("x")) || relay.Permanent(nil) != nil {
		t.Fatal("Permanent/IsPermanent")
	}
}
