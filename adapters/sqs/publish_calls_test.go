package sqs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/go-relay/relay"
	relaysqs "github.com/go-relay/relay/adapters/sqs"
	"github.com/go-relay/relay/internal/testkit/relaytest"
)

// These tests drive the publish paths that goaws does not take by itself
// (a service without the batch call, entries failed one by one) by
// answering chosen calls in the test, for SQS and SNS alike.

// interceptor answers the calls for which answer returns a response (or
// an error) itself and passes the others on. It records the bodies of the
// calls it sees, per action.
type interceptor struct {
	next   http.RoundTripper
	answer func(action string, body []byte, n int) (*http.Response, error) // n: calls of action so far, this one included

	mu     sync.Mutex
	bodies map[string][]string
}

func (ic *interceptor) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	action := awsAction(req, body)
	ic.mu.Lock()
	if ic.bodies == nil {
		ic.bodies = map[string][]string{}
	}
	ic.bodies[action] = append(ic.bodies[action], string(body))
	n := len(ic.bodies[action])
	ic.mu.Unlock()
	if ic.answer != nil {
		if resp, err := ic.answer(action, body, n); resp != nil || err != nil {
			if resp != nil {
				resp.Request = req
			}
			return resp, err
		}
	}
	return ic.next.RoundTrip(req)
}

func (ic *interceptor) calls(action string) []string {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	return append([]string(nil), ic.bodies[action]...)
}

// awsAction is the action of an SQS (JSON protocol: X-Amz-Target) or SNS
// (query protocol: Action= in the form body) request.
func awsAction(req *http.Request, body []byte) string {
	if target := req.Header.Get("X-Amz-Target"); target != "" {
		return target[strings.LastIndexByte(target, '.')+1:]
	}
	for _, kv := range strings.Split(string(body), "&") {
		if v, ok := strings.CutPrefix(kv, "Action="); ok {
			return v
		}
	}
	return ""
}

// batchAction and singleAction are the publish calls of scheme.
func batchAction(scheme string) string {
	if scheme == relaysqs.SchemeSNS {
		return "PublishBatch"
	}
	return "SendMessageBatch"
}

func singleAction(scheme string) string {
	if scheme == relaysqs.SchemeSNS {
		return "Publish"
	}
	return "SendMessage"
}

// apiError is a client error response of scheme's protocol.
func apiError(scheme, code string) *http.Response {
	if scheme == relaysqs.SchemeSNS {
		return &http.Response{StatusCode: http.StatusBadRequest, Status: "400 Bad Request",
			Header: http.Header{"Content-Type": {"text/xml"}},
			Body: io.NopCloser(strings.NewReader(`<ErrorResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/"><Error><Type>Sender</Type><Code>` +
				code + `</Code><Message>injected</Message></Error><RequestId>r</RequestId></ErrorResponse>`))}
	}
	return &http.Response{StatusCode: http.StatusBadRequest, Status: "400 Bad Request",
		Header: http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
		Body:   io.NopCloser(strings.NewReader(`{"__type":"` + code + `","message":"injected"}`))}
}

// failedEntryResponse is a successful batch call of scheme that lists the
// entry with Id id as failed (sender fault, code) and no successes.
func failedEntryResponse(scheme, id, code string) *http.Response {
	if scheme == relaysqs.SchemeSNS {
		return &http.Response{StatusCode: http.StatusOK, Status: "200 OK",
			Header: http.Header{"Content-Type": {"text/xml"}},
			Body: io.NopCloser(strings.NewReader(`<PublishBatchResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/"><PublishBatchResult><Successful/><Failed><member><Id>` +
				id + `</Id><Code>` + code + `</Code><Message>injected</Message><SenderFault>true</SenderFault></member></Failed></PublishBatchResult>` +
				`<ResponseMetadata><RequestId>r</RequestId></ResponseMetadata></PublishBatchResponse>`))}
	}
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK",
		Header: http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
		Body:   io.NopCloser(strings.NewReader(`{"Failed":[{"Id":"` + id + `","Code":"` + code + `","Message":"injected","SenderFault":true}]}`))}
}

// interceptedPub is a publisher of scheme whose calls go through ic.
func interceptedPub(t *testing.T, scheme string, fifo bool, ic *interceptor) relay.Publisher {
	t.Helper()
	cfg := benchConfig(t)
	cfg.MaxAttempts = 1
	cfg.FIFO = fifo
	opt := relaysqs.WithRoundTripper(func(rt http.RoundTripper) http.RoundTripper {
		ic.next = rt
		return ic
	})
	newPub := relaysqs.NewSQSPublisher
	if scheme == relaysqs.SchemeSNS {
		newPub = relaysqs.NewSNSPublisher
	}
	pub, err := newPub(context.Background(), cfg, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// provisionedSub is a subscriber of topic on scheme (for SNS: of group g,
// provisioned so that it gets what is published from now on).
func provisionedSub(t *testing.T, scheme, topic string, fifo bool) relay.Subscriber {
	t.Helper()
	var extra []string
	if fifo {
		extra = append(extra, "fifo=true")
	}
	if scheme == relaysqs.SchemeSNS {
		extra = append(extra, "group=g")
	}
	sub := relaytest.OpenSubscriber(t, baseURL(t, scheme, extra...))
	provision(t, sub, topic)
	return sub
}

// receiveAll acks and returns the payloads of n deliveries, in order.
func receiveAll(t *testing.T, sub relay.Subscriber, topic string, n int) []string {
	t.Helper()
	ch := subscribe(t, sub, topic)
	var got []string
	for range n {
		m := relaytest.Next(t, ch, "published message")
		got = append(got, string(m.Payload))
		_ = m.Ack()
	}
	return got
}

func payloadMsgs(prefix, key string, n int) []*relay.Message {
	msgs := make([]*relay.Message, n)
	for i := range msgs {
		msgs[i] = &relay.Message{ID: relay.NewID(), Key: key, Payload: []byte(fmt.Sprintf("%s-%d", prefix, i))}
	}
	return msgs
}

// onlyFailed checks that err, a Publish error, is a *relay.PublishError
// that fails m alone, and returns m's error.
func onlyFailed(t *testing.T, err error, m *relay.Message) error {
	t.Helper()
	var pe *relay.PublishError
	if !errors.As(err, &pe) {
		t.Fatalf("Publish: %v, want a *relay.PublishError for %s", err, m.Payload)
	}
	if ids := pe.FailedIDs(); len(ids) != 1 || ids[0] != m.ID {
		t.Fatalf("failed IDs %v, want only %s (%s)", ids, m.ID, m.Payload)
	}
	return pe.Failed[0].Err
}

// A service without the batch call is detected on the first call, and
// from then on every message is sent with one single call, carrying the
// FIFO group and deduplication IDs.
func TestPublishWithoutBatchCall(t *testing.T) {
	for _, scheme := range []string{relaysqs.SchemeSQS, relaysqs.SchemeSNS} {
		t.Run(scheme, func(t *testing.T) {
			topic := name("nobatch") + ".fifo"
			ic := &interceptor{answer: func(action string, _ []byte, _ int) (*http.Response, error) {
				if action == batchAction(scheme) {
					return apiError(scheme, "InvalidAction"), nil
				}
				return nil, nil
			}}
			pub := interceptedPub(t, scheme, true, ic)
			sub := provisionedSub(t, scheme, topic, true)
			first, second := payloadMsgs("first", "k", 3), payloadMsgs("second", "k", 2)
			relaytest.Publish(t, pub, topic, first...)
			relaytest.Publish(t, pub, topic, second...)

			if got := len(ic.calls(batchAction(scheme))); got != 1 {
				t.Errorf("%d %s calls, want 1 (the one that showed the service lacks it)", got, batchAction(scheme))
			}
			singles := ic.calls(singleAction(scheme))
			if len(singles) != 5 {
				t.Fatalf("%d %s calls for 5 messages, want 5", len(singles), singleAction(scheme))
			}
			for i, body := range singles {
				if !strings.Contains(body, "MessageGroupId") || !strings.Contains(body, "MessageDeduplicationId") {
					t.Errorf("%s call %d on a FIFO topic lacks MessageGroupId or MessageDeduplicationId: %s", singleAction(scheme), i, body)
				}
			}
			want := "first-0 first-1 first-2 second-0 second-1"
			if got := strings.Join(receiveAll(t, sub, topic, 5), " "); got != want {
				t.Errorf("received %s, want %s", got, want)
			}
		})
	}
}

// An entry that the batch call lists as failed fails its own message (by
// the entry's Id, the message's index in the call) with an EntryError;
// the call's other messages are published.
func TestPublishFailedEntry(t *testing.T) {
	for _, scheme := range []string{relaysqs.SchemeSQS, relaysqs.SchemeSNS} {
		t.Run(scheme, func(t *testing.T) {
			topic := name("entry")
			ic := &interceptor{answer: func(action string, _ []byte, _ int) (*http.Response, error) {
				if action == batchAction(scheme) {
					return failedEntryResponse(scheme, "2", "InvalidParameterValue"), nil
				}
				return nil, nil
			}}
			pub := interceptedPub(t, scheme, false, ic)
			msgs := payloadMsgs("m", "", 3)
			failure := onlyFailed(t, pub.Publish(context.Background(), topic, msgs...), msgs[2])
			var ee *relaysqs.EntryError
			if !errors.As(failure, &ee) || ee.Code != "InvalidParameterValue" || ee.Message != "injected" || !ee.SenderFault {
				t.Errorf("failure %v (%#v), want EntryError{InvalidParameterValue, injected, sender fault}", failure, ee)
			}
			if got := len(ic.calls(batchAction(scheme))); got != 1 {
				t.Errorf("%d batch calls, want 1: a sender-fault entry is not sent again", got)
			}
		})
	}
}

// Without the batch call: a failure of the first single call that the
// service did not answer (nothing was sent yet) fails the call as a
// whole, which is sent again; a later message's error answer fails only
// that message.
func TestPublishSingleCallFailures(t *testing.T) {
	for _, scheme := range []string{relaysqs.SchemeSQS, relaysqs.SchemeSNS} {
		t.Run(scheme, func(t *testing.T) {
			topic := name("singles")
			ic := &interceptor{answer: func(action string, body []byte, n int) (*http.Response, error) {
				switch {
				case action == batchAction(scheme):
					return apiError(scheme, "InvalidAction"), nil
				case action == singleAction(scheme) && n == 1:
					return nil, errors.New("injected: connection reset")
				case action == singleAction(scheme) && bytes.Contains(body, []byte("m-1")):
					return apiError(scheme, "InvalidParameterValue"), nil
				}
				return nil, nil
			}}
			pub := interceptedPub(t, scheme, false, ic)
			sub := provisionedSub(t, scheme, topic, false)
			msgs := payloadMsgs("m", "", 3)
			failure := onlyFailed(t, pub.Publish(context.Background(), topic, msgs...), msgs[1])
			var ee *relaysqs.EntryError
			if errors.As(failure, &ee) {
				t.Errorf("m-1 failed with an EntryError (%v); a single call's error is the call's own", ee)
			}
			// The unanswered first call, then m-0, m-1 (refused) and m-2.
			if got := len(ic.calls(singleAction(scheme))); got != 4 {
				t.Errorf("%d %s calls, want 4", got, singleAction(scheme))
			}
			got := receiveAll(t, sub, topic, 2)
			if strings.Join(got, " ") != "m-0 m-2" && strings.Join(got, " ") != "m-2 m-0" {
				t.Errorf("received %v, want m-0 and m-2", got)
			}
		})
	}
}

// serviceFaultEntryResponse is a successful batch call of scheme that
// lists the entry with Id id as failed by a service fault (InternalError,
// not the sender's) and no successes.
func serviceFaultEntryResponse(scheme, id string) *http.Response {
	if scheme == relaysqs.SchemeSNS {
		return &http.Response{StatusCode: http.StatusOK, Status: "200 OK",
			Header: http.Header{"Content-Type": {"text/xml"}},
			Body: io.NopCloser(strings.NewReader(`<PublishBatchResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/"><PublishBatchResult><Successful/><Failed><member><Id>` +
				id + `</Id><Code>InternalError</Code><Message>injected</Message><SenderFault>false</SenderFault></member></Failed></PublishBatchResult>` +
				`<ResponseMetadata><RequestId>r</RequestId></ResponseMetadata></PublishBatchResponse>`))}
	}
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK",
		Header: http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
		Body:   io.NopCloser(strings.NewReader(`{"Failed":[{"Id":"` + id + `","Code":"InternalError","Message":"injected","SenderFault":false}]}`))}
}

// An entry failed by a service fault is sent again, alone, until it is
// accepted (here after three failures), and published once; on FIFO it
// is not sent again (that would reorder its group) and fails with its
// EntryError.
func TestPublishServiceFaultEntrySentAgain(t *testing.T) {
	for _, scheme := range []string{relaysqs.SchemeSQS, relaysqs.SchemeSNS} {
		for _, fifo := range []bool{false, true} {
			t.Run(fmt.Sprint(scheme, "/fifo=", fifo), func(t *testing.T) {
				topic, key := name("fault"), ""
				if fifo {
					topic, key = topic+".fifo", "k"
				}
				ic := &interceptor{answer: func(action string, _ []byte, n int) (*http.Response, error) {
					switch {
					case action == batchAction(scheme) && n == 1:
						return serviceFaultEntryResponse(scheme, "1"), nil // m-1
					case action == batchAction(scheme) && n <= 3:
						return serviceFaultEntryResponse(scheme, "0"), nil // m-1, sent alone
					}
					return nil, nil
				}}
				pub := interceptedPub(t, scheme, fifo, ic)
				msgs := payloadMsgs("m", key, 3)
				err := pub.Publish(context.Background(), topic, msgs...)
				calls := ic.calls(batchAction(scheme))
				if fifo {
					var ee *relaysqs.EntryError
					if failure := onlyFailed(t, err, msgs[1]); !errors.As(failure, &ee) || ee.Code != "InternalError" {
						t.Errorf("failure %v, want the EntryError InternalError", failure)
					}
					if len(calls) != 1 {
						t.Errorf("%d batch calls, want 1: a FIFO entry is not sent again", len(calls))
					}
					return
				}
				if err != nil {
					t.Fatalf("Publish: %v", err)
				}
				if len(calls) != 4 {
					t.Fatalf("%d batch calls, want 4", len(calls))
				}
				for i, body := range calls[1:] {
					if !strings.Contains(body, "m-1") || strings.Contains(body, "m-0") || strings.Contains(body, "m-2") {
						t.Errorf("batch call %d carries %q, want m-1 alone", i+2, body)
					}
				}
			})
		}
	}
}
