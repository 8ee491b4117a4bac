package sqs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-relay/relay"
	relaysqs "github.com/go-relay/relay/adapters/sqs"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// receiveAttempts records the ReceiveRequestAttemptId of every
// ReceiveMessage attempt and fails the first attempt in transit (as if the
// connection broke), so that the SDK sends it again.
type receiveAttempts struct {
	next http.RoundTripper
	mu   sync.Mutex
	ids  []string
}

func (f *receiveAttempts) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".ReceiveMessage") && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		var in struct{ ReceiveRequestAttemptId string }
		if err := json.Unmarshal(body, &in); err != nil {
			return nil, err
		}
		f.mu.Lock()
		f.ids = append(f.ids, in.ReceiveRequestAttemptId)
		first := len(f.ids) == 1
		f.mu.Unlock()
		if first {
			return nil, errors.New("injected: connection reset")
		}
	}
	return f.next.RoundTrip(req)
}

func (f *receiveAttempts) recorded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ids...)
}

// A FIFO receive carries an attempt ID, the same on the SDK's retry of one
// call (so that SQS answers a retry after a lost answer with the same
// messages, instead of leaving them invisible), and a new one per call. A
// standard queue's receives carry none.
func TestReceiveAttemptID(t *testing.T) {
	for _, fifo := range []bool{true, false} {
		t.Run(map[bool]string{true: "fifo", false: "standard"}[fifo], func(t *testing.T) {
			topic := name("attempt")
			if fifo {
				topic += ".fifo"
			}
			cfg := benchConfig(t)
			cfg.FIFO = fifo
			if fifo {
				cfg.Pollers = 1 // the default on FIFO, made explicit: ids[1] must be ids[0]'s retry
			}
			rec := &receiveAttempts{}
			sub, err := relaysqs.NewSQSSubscriber(context.Background(), cfg, relaysqs.WithRoundTripper(func(rt http.RoundTripper) http.RoundTripper {
				rec.next = rt
				return rec
			}))
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			provision(t, sub, topic)
			pub := relaytest.OpenPublisher(t, baseURL(t, "sqs"))
			m := &relay.Message{ID: relay.NewID(), Key: "k", Payload: []byte("p")}
			if err := pub.Publish(context.Background(), topic, m); err != nil {
				t.Fatal(err)
			}
			ch := subscribe(t, sub, topic)
			if got := relaytest.Next(t, ch, "the message"); got.ID != m.ID {
				t.Fatalf("got %s, want %s", got.ID, m.ID)
			}
			// The next call starts once the message is delivered.
			ids := rec.recorded()
			for deadline := time.Now().Add(5 * time.Second); len(ids) < 3 && time.Now().Before(deadline); ids = rec.recorded() {
				time.Sleep(10 * time.Millisecond)
			}
			if len(ids) < 3 {
				t.Fatalf("%d ReceiveMessage attempts recorded, want the failed one, its retry and the next call", len(ids))
			}
			if !fifo {
				for _, id := range ids {
					if id != "" {
						t.Fatalf("a standard queue's receive carried attempt ID %q", id)
					}
				}
				return
			}
			if ids[0] == "" || ids[1] != ids[0] {
				t.Fatalf("attempt IDs %q: the retry must repeat the first call's ID", ids[:2])
			}
			if ids[2] == "" || ids[2] == ids[0] {
				t.Fatalf("attempt IDs %q: the next call must have an ID of its own", ids[:3])
			}
		})
	}
}
