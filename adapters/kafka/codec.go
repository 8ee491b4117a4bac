package kafka

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/go-relay/relay"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Wire format. A relay message is one Kafka record:
//
//   - Key: the record key (nil when Key is "").
//   - Payload: the record value.
//   - ID: the header "relay-id".
//   - Metadata: one header per entry, with the same name. Names that begin
//     with the reserved prefix "relay-" are sent as "relay-md-" + name so
//     they never collide with relay's own headers; the receiver strips it.
//
// A record from a foreign producer (no relay-id header) gets the ID
// "kafka:TOPIC:PARTITION:OFFSET", the same on every delivery; all its
// headers become metadata.
const (
	reservedPrefix = "relay-"
	headerID       = "relay-id"
	metadataPrefix = "relay-md-"
)

func encodeRecord(topic string, m *relay.Message) *kgo.Record {
	r := &kgo.Record{Topic: topic, Value: m.Payload}
	if m.Key != "" {
		r.Key = []byte(m.Key)
	}
	r.Headers = make([]kgo.RecordHeader, 0, 1+len(m.Metadata))
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: headerID, Value: []byte(m.ID)})
	for k, v := range m.Metadata {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: headerName(k), Value: []byte(v)})
	}
	return r
}

func headerName(k string) string {
	if strings.HasPrefix(k, reservedPrefix) {
		return metadataPrefix + k
	}
	return k
}

// decodeRecord never fails: whatever a record carries becomes a message.
// The payload is copied so that a redelivery is unaffected by changes the
// application made to an earlier delivery.
func decodeRecord(r *kgo.Record) *relay.Message {
	m := &relay.Message{}
	if len(r.Value) > 0 {
		m.Payload = append([]byte(nil), r.Value...)
	}
	if len(r.Key) > 0 {
		m.Key = string(r.Key)
	}
	for _, h := range r.Headers {
		switch {
		case h.Key == headerID:
			m.ID = string(h.Value)
		case strings.HasPrefix(h.Key, metadataPrefix):
			setMD(m, h.Key[len(metadataPrefix):], h.Value)
		default:
			setMD(m, h.Key, h.Value)
		}
	}
	if m.ID == "" {
		m.ID = foreignID(r)
	}
	return m
}

func setMD(m *relay.Message, k string, v []byte) {
	if m.Metadata == nil {
		m.Metadata = make(relay.Metadata)
	}
	m.Metadata[k] = string(v)
}

func foreignID(r *kgo.Record) string {
	return "kafka:" + r.Topic + ":" + strconv.FormatInt(int64(r.Partition), 10) + ":" + strconv.FormatInt(r.Offset, 10)
}

// Upper bounds of Kafka's record encoding (v2 record batches): the batch
// header, and per record its length, attributes, timestamp and offset
// deltas and the varint lengths of key, value, header count and each
// header's name and value.
const (
	batchOverhead     = 61
	recordOverhead    = 5 + 1 + 10 + 5 + 5 + 5 + 5
	headerOverhead    = 5 + 5
	maxTopicNameBytes = 249
)

// recordSize bounds the bytes m takes as a record alone in a batch.
func recordSize(m *relay.Message) int {
	n := batchOverhead + recordOverhead + len(m.Key) + len(m.Payload)
	n += headerOverhead + len(headerID) + len(m.ID)
	for k, v := range m.Metadata {
		n += headerOverhead + len(headerName(k)) + len(v)
	}
	return n
}

func validateTopic(topic string) error {
	if topic == "" || topic == "." || topic == ".." {
		return fmt.Errorf("%w: %q", relay.ErrInvalidTopic, topic)
	}
	if len(topic) > maxTopicNameBytes {
		return fmt.Errorf("%w: %d bytes, Kafka allows %d", relay.ErrInvalidTopic, len(topic), maxTopicNameBytes)
	}
	for i := 0; i < len(topic); i++ {
		c := topic[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q: Kafka topic names use only ASCII letters, digits, '.', '_' and '-'", relay.ErrInvalidTopic, topic)
		}
	}
	return nil
}
