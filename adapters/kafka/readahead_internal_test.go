package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-relay/relay/driver"
)

// The poll takes all the buffered records when every unpaused queue can
// take them whole, and as many as fit otherwise; a paused topic's queue
// does not hold the others back.
func TestPollSize(t *testing.T) {
	// recv's read-ahead holds records records weighing queued bytes, of
	// recent size sizeGuess.
	recv := func(records, queued, sizeGuess int) *receiver {
		ahead := driver.NewReadAhead(1<<20, aheadRecords(256), handleBytes)
		value := make([]byte, queued)
		for i := range records {
			ahead.Push(&handle{rec: &kgo.Record{Value: value[queued*i/records : queued*(i+1)/records]}})
		}
		if sizeGuess > 0 {
			ahead.Observe(sizeGuess)
		}
		return &receiver{ahead: ahead, window: 256}
	}
	full := recv(4095, 1<<20-256, 256)
	for _, tc := range []struct {
		name           string
		recvs          map[string]*receiver
		records, bytes int
		want           int
	}{
		{"nothing buffered: what fits", map[string]*receiver{"a": recv(0, 0, 256)}, 0, 0, 256},
		{"a fetch that fits: all of it", map[string]*receiver{"a": recv(0, 0, 256)}, 12000, 3 << 20, 12000},
		{"a fetch too large: what fits", map[string]*receiver{"a": recv(0, 0, 1024)}, 12000, 12 << 20, 256},
		{"one queue nearly full: what fits it", map[string]*receiver{"a": recv(0, 0, 256), "b": full}, 14000, 7 << 19, 1},
		{"a paused topic does not count", map[string]*receiver{"a": recv(0, 0, 256), "b": func() *receiver { r := recv(1, 4<<20, 256); r.topicPaused = true; return r }()}, 12000, 3 << 20, 12000},
		{"before any record: one", map[string]*receiver{"a": recv(0, 0, 0)}, 0, 0, 1},
	} {
		m := &member{d: &subDriver{maxWindow: 256}, recvs: tc.recvs}
		if got := m.pollSizeFor(tc.records, tc.bytes); got != tc.want {
			t.Errorf("%s: pollSizeFor(%d, %d) = %d, want %d", tc.name, tc.records, tc.bytes, got, tc.want)
		}
	}
}
