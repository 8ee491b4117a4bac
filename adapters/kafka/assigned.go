package kafka

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-relay/relay"
)

// assigned tracks the partitions a group member holds, per topic, from the
// client's assignment callbacks. Safe for concurrent use.
type assigned struct {
	mu    sync.Mutex
	parts map[string]map[int32]struct{}
}

// opts are the client options that keep a current: the assigned
// callback, and revoked and lost callbacks that run after a's bookkeeping
// (nil for none).
func (a *assigned) opts(revoked, lost func(context.Context, *kgo.Client, map[string][]int32)) []kgo.Opt {
	wrap := func(next func(context.Context, *kgo.Client, map[string][]int32)) func(context.Context, *kgo.Client, map[string][]int32) {
		return func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			a.remove(m)
			if next != nil {
				next(ctx, cl, m)
			}
		}
	}
	return []kgo.Opt{
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { a.add(m) }),
		kgo.OnPartitionsRevoked(wrap(revoked)),
		kgo.OnPartitionsLost(wrap(lost)),
	}
}

func (a *assigned) add(m map[string][]int32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.parts == nil {
		a.parts = map[string]map[int32]struct{}{}
	}
	for t, ps := range m {
		if a.parts[t] == nil {
			a.parts[t] = map[int32]struct{}{}
		}
		for _, p := range ps {
			a.parts[t][p] = struct{}{}
		}
	}
}

func (a *assigned) remove(m map[string][]int32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for t, ps := range m {
		for _, p := range ps {
			delete(a.parts[t], p)
		}
	}
}

// of returns topic's partitions held now, ascending.
func (a *assigned) of(topic string) relay.Assignment {
	a.mu.Lock()
	defer a.mu.Unlock()
	ps := make([]int32, 0, len(a.parts[topic]))
	for p := range a.parts[topic] {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return relay.Assignment{Mode: relay.SharePartitions, Partitions: ps}
}

// Assignment implements driver.AssignmentDriver: the partitions of topic
// this subscriber's group member holds now.
func (d *subDriver) Assignment(topic string) (relay.Assignment, error) {
	d.gmu.Lock()
	defer d.gmu.Unlock()
	for _, m := range d.members {
		if m.receiver(topic) != nil {
			return m.assigned.of(topic), nil
		}
	}
	return relay.Assignment{}, fmt.Errorf("%w: topic %q is not subscribed", relay.ErrNotSupported, topic)
}

// Assignment implements driver.AssignmentDriver: the partitions the pair's
// member holds now (none once it left the group after a fence).
func (d *eoDriver) Assignment(topic string) (relay.Assignment, error) {
	return d.p.assigned.of(topic), nil
}
