package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/go-relay/relay"
)

// Options split a run in two stages (see the package doc).
type Options struct {
	Run   string // names the run's topics and message IDs; "": a fresh name
	Stage string // "all" (or ""), "publish" or "consume"
}

// story is the messages of a run, per topic, in publish order.
type story struct{ placed, charges, queued []*relay.Message }

// compose makes the run's messages with newMessage and tells t who should
// get each.
func compose(t *tally, brokerDedups bool, newMessage func(label string, body []byte) *relay.Message) story {
	var st story
	for _, o := range orders {
		body, _ := json.Marshal(o)
		m := newMessage("order-"+o.ID, body)
		m.Key = o.ID // ordering key: one order's events stay in order
		m.Metadata = relay.Metadata{"event": "order.placed"}
		st.placed = append(st.placed, m)
		for _, s := range services {
			t.expect(s.group, m.ID)
		}
		c := newMessage("charge-"+o.ID, []byte(o.Total+" for "+o.ID))
		c.Key = o.ID
		st.charges = append(st.charges, c)
		t.expect("payments", c.ID)
		if o.ID == flakyEmail {
			// The order service's publish of this command timed out and it
			// published again: the same message (same ID) twice.
			st.charges = append(st.charges, c)
			if !brokerDedups {
				t.expect("duplicates", c.ID)
			}
		}
	}
	bad := newMessage("order-A-1004", []byte(malformed))
	bad.Key = "A-1004"
	bad.Metadata = relay.Metadata{"event": "order.placed"}
	st.placed = append(st.placed, bad)
	for _, s := range services {
		t.expect("poison", bad.ID+"/"+s.group)
	}
	for i := 1; i <= resizeJobs; i++ {
		m := newMessage(fmt.Sprintf("job-%02d", i), fmt.Appendf(nil, "photo-%02d.jpg", i))
		st.queued = append(st.queued, m)
		t.expect("resizers", m.ID)
	}
	return st
}

// publish sends the story: each Publish sends its batch in one go and
// returns once the broker has accepted every message.
func (st story) publish(ctx context.Context, t *tally, pub relay.Publisher, orderTopic, chargeTopic, jobTopic string, brokerDedups bool) error {
	t.printf("order service: placing %d orders on %s (one of them malformed)\n", len(st.placed), orderTopic)
	if err := pub.Publish(ctx, orderTopic, st.placed...); err != nil {
		return fmt.Errorf("publish orders: %w", err)
	}
	t.printf("order service: sending %d charge commands on %s (one twice)\n", len(st.charges), chargeTopic)
	if brokerDedups {
		t.printf("               (this broker stores a message published twice with one ID once: payments gets it once)\n")
	}
	if err := pub.Publish(ctx, chargeTopic, st.charges...); err != nil {
		return fmt.Errorf("publish charges: %w", err)
	}
	t.printf("catalog:       queueing %d resize jobs on %s\n", len(st.queued), jobTopic)
	if err := pub.Publish(ctx, jobTopic, st.queued...); err != nil {
		return fmt.Errorf("publish jobs: %w", err)
	}
	return nil
}
