package bridge

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/middleware"
)

// Dedup on the pipelined path. A batch's messages go through the same
// steps the Dedup middleware takes for one message (chain.go), with the
// same store, key (route name + message ID), lease and TTL, so that both
// paths see each other's keys:
//
//   - before the publish, each message's key is reserved in the store (in
//     one call for a middleware.BatchStore, such as the Redis store). A
//     message whose key is done is a duplicate: it is acked without
//     forwarding and counted in relay_bridge_duplicates_total. A message
//     whose key another holder reserved (a copy in another lane or
//     replica), or whose reservation failed, is forwarded alone through
//     the per-message chain after the batch, which dedups it again
//     (ErrInProgress is retried there until the holder commits or
//     releases).
//   - A message whose ID an earlier message of the same batch has (a
//     twin) is not published: the router settles messages of one batch
//     that share an ID alike (router.BatchError), so it is acked when the
//     first is and counted as a duplicate then.
//   - After the publish, the key of each confirmed copy is committed (a
//     failed commit is logged: the copy went out, so failing the message
//     would forward it again). The key of each failed copy is released
//     before the copy is forwarded alone, so the per-message chain can
//     reserve it; anything still reserved when the batch ends (a stopping
//     route, a panic) is released too.
//
// So a message is marked seen only after the destination confirmed its
// copy, and one whose copy failed is never marked: it is retried, poisoned
// or redelivered, never lost to dedup.

// dedupLease is how long a reservation holds: longer than one publish.
func (r *route) dedupLease() time.Duration {
	return max(time.Minute, r.cfg.PublishTimeout+10*time.Second)
}

// batchDedup is the dedup state of one batch.
type batchDedup struct {
	r     *route
	token string
	// held maps the IDs of the messages to publish to the key reserved
	// for them, until it is committed or released.
	held map[string]string
	// twins counts the messages not published because an earlier message
	// of the batch has their ID.
	twins    map[string]int
	twinMsgs []*relay.Message
}

// newBatchDedup returns the dedup state of one batch of r, holding no
// reservation yet.
func newBatchDedup(r *route) *batchDedup {
	return &batchDedup{r: r, token: newToken(), held: map[string]string{}}
}

// reserve sorts msgs (not looped, in delivery order) for a dedup route:
// those to publish in the batch (their keys reserved), and those to
// forward alone through the per-message chain, each in delivery order.
// Duplicates are counted and dropped; twins are recorded.
//
// With traced, a duplicate is forwarded alone too, so that the chain's
// Dedup records it on the message's process span (one more store call,
// for duplicates only).
func (d *batchDedup) reserve(ctx context.Context, msgs []*relay.Message, traced bool) (send, alone []*relay.Message) {
	r := d.r
	seen := make(map[string]bool, len(msgs))
	keyOf := make([]string, len(msgs)) // "" for no ID and for twins
	var keys []string                  // one per ID, in order
	for i, m := range msgs {
		key := middleware.DefaultDedupKey(ctx, m)
		if key == "" { // no ID: forwarded without dedup, as Dedup does
			continue
		}
		if seen[m.ID] {
			if d.twins == nil {
				d.twins = map[string]int{}
			}
			d.twins[m.ID]++
			d.twinMsgs = append(d.twinMsgs, m)
			continue
		}
		seen[m.ID] = true
		keyOf[i] = key
		keys = append(keys, key)
	}
	finished := false
	defer func() {
		if !finished { // a panic below: hold nothing the batch does not know of
			d.releaseKeys(ctx, keys)
		}
	}()
	states, errs := middleware.ReserveAll(ctx, r.dedupStore, keys, d.token, r.dedupLease())
	send = make([]*relay.Message, 0, len(msgs))
	k := 0 // index of msgs[i]'s key in keys
	for i, m := range msgs {
		key := keyOf[i]
		if key == "" {
			if m.ID == "" {
				send = append(send, m)
			}
			continue // a twin
		}
		switch state, err := states[k], errs[k]; {
		case err != nil, state == middleware.InProgress:
			alone = append(alone, m)
		case state == middleware.Done && traced:
			alone = append(alone, m)
		case state == middleware.Done:
			routeObserver{r}.Deduplicated(ctx, m, key)
		default:
			d.held[m.ID] = key
			send = append(send, m)
		}
		k++
	}
	finished = true
	return send, alone
}

// commit marks done the keys of srcs whose copies the destination
// confirmed: all but the indexes in failed, which stay held until they
// are released.
func (d *batchDedup) commit(ctx context.Context, srcs []*relay.Message, failed []int) {
	if d == nil {
		return
	}
	bad := make(map[int]bool, len(failed))
	for _, i := range failed {
		bad[i] = true
	}
	ids := make([]string, 0, len(srcs))
	for i, m := range srcs {
		if !bad[i] {
			ids = append(ids, m.ID)
		}
	}
	d.commitIDs(ctx, ids...)
}

// take removes and returns the reservations this batch holds for ids.
func (d *batchDedup) take(ids []string) (keys []string) {
	if d == nil {
		return nil
	}
	for _, id := range ids {
		if key, ok := d.held[id]; ok {
			delete(d.held, id)
			keys = append(keys, key)
		}
	}
	return keys
}

// commitIDs marks the keys of ids done for the route's TTL.
func (d *batchDedup) commitIDs(ctx context.Context, ids ...string) {
	keys := d.take(ids)
	if len(keys) == 0 {
		return
	}
	err := middleware.CommitAll(context.WithoutCancel(ctx), d.r.dedupStore, keys, d.token, d.r.cfg.Dedup.TTL)
	if err != nil {
		d.r.log.Warn("dedup: commit failed; a duplicate may run again after the lease", "keys", len(keys), "err", err)
	}
}

// releaseIDs drops the reservations of ids, so that they can be
// forwarded again.
func (d *batchDedup) releaseIDs(ctx context.Context, ids ...string) {
	d.releaseKeys(ctx, d.take(ids))
}

// releaseKeys drops the batch's reservations of keys.
func (d *batchDedup) releaseKeys(ctx context.Context, keys []string) {
	if len(keys) == 0 {
		return
	}
	err := middleware.ReleaseAll(context.WithoutCancel(ctx), d.r.dedupStore, keys, d.token)
	if err != nil {
		d.r.log.Warn("dedup: release failed; the keys stay blocked until their lease expires", "keys", len(keys), "err", err)
	}
}

// releaseRest releases every reservation still held.
func (d *batchDedup) releaseRest(ctx context.Context) {
	if d == nil || len(d.held) == 0 {
		return
	}
	d.releaseIDs(ctx, slices.Collect(maps.Keys(d.held))...)
}

// countTwins counts the twins of every ID that is not in failed (the
// router acks them with their first message) as duplicates, and ends
// their spans with their first message's outcome.
func (d *batchDedup) countTwins(failed map[string]error, spans *batchSpans) {
	if d == nil {
		return
	}
	for _, m := range d.twinMsgs {
		spans.end(m, failed[m.ID])
	}
	for id, n := range d.twins {
		if _, ok := failed[id]; ok {
			continue
		}
		d.r.m.duplicates.Add(float64(n))
		d.r.log.Debug("not forwarding a duplicate", "id", id, "copies", n)
	}
}

// errNotReserved is why a message was forwarded alone rather than in its
// batch: dedup could not reserve its key there.
var errNotReserved = errors.New("dedup: not reserved in its batch")

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
