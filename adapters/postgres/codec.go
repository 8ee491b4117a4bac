package postgres

import (
	"sort"
	"strconv"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

// pgText names PostgreSQL's text columns in the errors of rowqueue.CheckText.
const pgText = "PostgreSQL text"

// row is a message as the insert statement takes it.
type row struct {
	id, key          string
	mdKeys, mdValues []string
	payload          []byte
	// delayUS is how long from the insert its delivery rows stay
	// invisible, in microseconds (0: claimable at once).
	delayUS int64
}

// toRow lays out m for the messages table: metadata sorted by name (so
// that rows are stable and readable), never NULL arrays, and a present
// payload even when m.Payload is nil. A DeliverAt in the future becomes
// the delay of its delivery rows, rounded up to the microsecond and
// measured from now: the insert adds it to its own clock_timestamp(),
// which is later, so the rows are never visible before DeliverAt.
func toRow(m *relay.Message) row {
	r := row{id: m.ID, key: m.Key, mdKeys: make([]string, 0, len(m.Metadata)), mdValues: make([]string, 0, len(m.Metadata)), payload: m.Payload}
	if !m.DeliverAt.IsZero() {
		if d, ok := driver.Delay(m, time.Now()); ok {
			r.delayUS = int64((d + time.Microsecond - 1) / time.Microsecond)
		}
	}
	for k := range m.Metadata {
		r.mdKeys = append(r.mdKeys, k)
	}
	sort.Strings(r.mdKeys)
	for _, k := range r.mdKeys {
		r.mdValues = append(r.mdValues, m.Metadata[k])
	}
	if r.payload == nil {
		r.payload = []byte{}
	}
	return r
}

func (r row) args(topic string) []any {
	return []any{topic, r.id, r.key, r.mdKeys, r.mdValues, r.payload, r.delayUS}
}

// DecodeMetadata turns the md_keys and md_values arrays of a messages row
// into metadata. Rows written by relay have distinct keys and arrays of one
// length. A row written by hand (through PublishSQLTx or plain SQL) may
// repeat a key: the first occurrence keeps its name, the 2nd, 3rd, ... are
// kept as "<name>#2", "<name>#3", ... (the next free number when that name
// is taken). A missing value counts as ""; extra values are kept under
// "relay-extra-value#N".
func DecodeMetadata(keys, values []string) relay.Metadata {
	if len(keys) == 0 && len(values) == 0 {
		return nil
	}
	md := make(relay.Metadata, max(len(keys), len(values)))
	type kv struct{ k, v string }
	var repeats []kv
	for i := 0; i < max(len(keys), len(values)); i++ {
		k, v := "relay-extra-value", ""
		if i < len(keys) {
			k = keys[i]
		}
		if i < len(values) {
			v = values[i]
		}
		if _, taken := md[k]; taken {
			repeats = append(repeats, kv{k, v})
			continue
		}
		md[k] = v
	}
	// Repeats are numbered after every first occurrence has its name, so
	// that a literal "<name>#2" later in the row keeps it.
	for _, r := range repeats {
		for n := 2; ; n++ {
			alt := r.k + "#" + strconv.Itoa(n)
			if _, taken := md[alt]; !taken {
				md[alt] = r.v
				break
			}
		}
	}
	return md
}
