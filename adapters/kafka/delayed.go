package kafka

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-relay/relay"
)

// Emulated delayed delivery (Message.DeliverAt), see docs/kafka.md.
//
// A delayed message for topic T is produced to a delay bucket topic
// "T.relay-delay-<b>" instead of T: the bucket b is the largest of
// delayBuckets not above the time left until it is due (the 0s bucket for
// less than a second). The record is the message's own record plus two
// headers, its due time and T. Every record of a bucket waits the same b
// after it was written, so records come due in the order of their
// offsets: the mover looks only at the head of each partition.
//
// The mover (one per target topic per subscriber, a member of the group
// moverGroup(T)) consumes T's bucket topics. It pauses a partition whose
// head has not waited its bucket yet; a head that has is routed again by
// the time left: to T when due, to a smaller bucket when a second or more
// is left, or it waits in memory (at most maxHeld records) for the last
// second. A bucket record's offset is committed only once the record it
// became is acknowledged by the broker: a crash repeats moves (delivers a
// message twice), never loses one.

// Headers a record carries while it waits in a delay bucket.
const (
	headerDelayDue   = "relay-delay-due"   // due time, Unix nanoseconds
	headerDelayTopic = "relay-delay-topic" // the topic it is due on
)

// DelayTopicInfix joins a topic and a bucket in a delay bucket topic's
// name: "orders" + DelayTopicInfix + "10s".
const DelayTopicInfix = ".relay-delay-"

// delayBuckets are the wait times of the delay bucket topics, ascending;
// the first is 0: records that wait their last second in the mover.
var delayBuckets = []time.Duration{0, time.Second, 10 * time.Second, time.Minute, 10 * time.Minute, time.Hour, 10 * time.Hour}

// maxHeld bounds the records a mover keeps in memory for their last
// second; beyond it, it pauses the partitions that would add more.
const maxHeld = 10000

func bucketName(b time.Duration) string {
	if b == 0 {
		return "0s"
	}
	return b.String() // 1s, 10s, 1m0s, 10m0s, 1h0m0s, 10h0m0s
}

// DelayTopics are the delay bucket topics of topic, smallest bucket first.
func DelayTopics(topic string) []string {
	out := make([]string, len(delayBuckets))
	for i, b := range delayBuckets {
		out[i] = topic + DelayTopicInfix + bucketName(b)
	}
	return out
}

// bucketFor is the bucket for a record with left to wait.
func bucketFor(left time.Duration) time.Duration {
	b := delayBuckets[0]
	for _, x := range delayBuckets {
		if x <= left {
			b = x
		}
	}
	return b
}

// bucketTopic is the bucket topic of target for a record with left to wait.
func bucketTopic(target string, left time.Duration) string {
	return target + DelayTopicInfix + bucketName(bucketFor(left))
}

// bucketOf is the wait time of a bucket topic of target, or false.
func bucketOf(target, topic string) (time.Duration, bool) {
	for _, b := range delayBuckets {
		if topic == target+DelayTopicInfix+bucketName(b) {
			return b, true
		}
	}
	return 0, false
}

// delayInto turns r, encoded for target, into its bucket record for a
// message due at due, left from now.
func delayInto(r *kgo.Record, target string, due time.Time, left time.Duration) {
	r.Topic = bucketTopic(target, left)
	r.Headers = append(r.Headers,
		kgo.RecordHeader{Key: headerDelayDue, Value: strconv.AppendInt(nil, due.UnixNano(), 10)},
		kgo.RecordHeader{Key: headerDelayTopic, Value: []byte(target)})
}

// delayHeaders reads the due time and target of a bucket record.
func delayHeaders(r *kgo.Record) (due time.Time, target string, ok bool) {
	var haveDue bool
	for _, h := range r.Headers {
		switch h.Key {
		case headerDelayDue:
			ns, err := strconv.ParseInt(string(h.Value), 10, 64)
			if err != nil {
				return time.Time{}, "", false
			}
			due, haveDue = time.Unix(0, ns), true
		case headerDelayTopic:
			target = string(h.Value)
		}
	}
	return due, target, haveDue && target != ""
}

// undelayed is the record r becomes on its target: the same key, value
// and headers without the delay headers.
func undelayed(r *kgo.Record, target string) *kgo.Record {
	out := &kgo.Record{Topic: target, Key: r.Key, Value: r.Value, Headers: make([]kgo.RecordHeader, 0, len(r.Headers))}
	for _, h := range r.Headers {
		if h.Key != headerDelayDue && h.Key != headerDelayTopic {
			out.Headers = append(out.Headers, h)
		}
	}
	return out
}

// rebucketed is r in the bucket for left, with its headers.
func rebucketed(r *kgo.Record, target string, left time.Duration) *kgo.Record {
	return &kgo.Record{Topic: bucketTopic(target, left), Key: r.Key, Value: r.Value, Headers: r.Headers}
}

// encodeDelayed fills r for m, due later, as the record of its bucket.
func encodeDelayed(r *kgo.Record, hdrs []kgo.RecordHeader, target string, m *relay.Message, left time.Duration) {
	encodeInto(r, hdrs, target, m)
	delayInto(r, target, m.DeliverAt, left)
}
