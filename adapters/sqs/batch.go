package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// visChange is a new visibility timeout for one held message.
type visChange struct {
	h    *handle
	secs int32
}

// settleParallel bounds the batch calls one settlement makes at once.
const settleParallel = 8

// inChunks calls fn for consecutive chunks of n items (at most MaxBatch
// each), several at once, and joins their errors.
func inChunks(n int, fn func(lo, hi int) error) error {
	if n == 0 {
		return nil
	}
	if n <= MaxBatch {
		return fn(0, n)
	}
	sem := make(chan struct{}, settleParallel)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += MaxBatch {
		hi := min(lo+MaxBatch, n)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(lo, hi); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// byQueue groups items by the queue their handle came from (a queue
// provisioned again after it vanished has a new URL).
func byQueue[T any](items []T, url func(T) string) map[string][]T {
	out := make(map[string][]T, 1)
	for _, it := range items {
		out[url(it)] = append(out[url(it)], it)
	}
	return out
}

// deleteMessages deletes the messages of hs (acks) in calls of ten and
// marks each one deleted. An entry refused for good (a stale receipt) is
// logged and marked too: SQS redelivers such a message. A call that
// failed, or entries worth trying again, make an error, and the shared
// layer retries the settlement.
func (d *subDriver) deleteMessages(ctx context.Context, hs []*handle) error {
	var errs []error
	for url, group := range byQueue(hs, func(h *handle) string { return h.queueURL }) {
		errs = append(errs, inChunks(len(group), func(lo, hi int) error {
			part := group[lo:hi]
			if d.noBatchDel.Load() {
				return d.deleteSingles(ctx, url, part)
			}
			entries := make([]sqstypes.DeleteMessageBatchRequestEntry, len(part))
			for i, h := range part {
				entries[i] = sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(h.receipt)}
			}
			out, err := d.c.sqs.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
			if err != nil {
				if isUnsupported(err) {
					d.noBatchDel.Store(true)
					return d.deleteSingles(ctx, url, part)
				}
				return fmt.Errorf("relay/sqs: deleting %d acked messages: %w", len(part), err)
			}
			failed := make([]bool, len(part))
			retry := 0
			for _, f := range out.Failed {
				i, err := strconv.Atoi(aws.ToString(f.Id))
				if err != nil || i < 0 || i >= len(part) {
					continue
				}
				if isPermanentCode(aws.ToString(f.Code), f.SenderFault) {
					d.log.Warn("relay/sqs: an acked message could not be deleted; SQS will deliver it again", "code", aws.ToString(f.Code), "reason", aws.ToString(f.Message))
					continue
				}
				failed[i] = true
				retry++
			}
			for i, h := range part {
				if !failed[i] {
					h.deleted.Store(true)
				}
			}
			if retry > 0 {
				return fmt.Errorf("relay/sqs: %d of %d acked messages were not deleted", retry, len(part))
			}
			return nil
		}))
	}
	return errors.Join(errs...)
}

func (d *subDriver) deleteSingles(ctx context.Context, url string, hs []*handle) error {
	for _, h := range hs {
		_, err := d.c.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: aws.String(h.receipt)})
		if err != nil {
			if !isInvalidHandle(err) && apiCode(err) == "" {
				return fmt.Errorf("relay/sqs: deleting an acked message: %w", err)
			}
			d.log.Warn("relay/sqs: an acked message could not be deleted; SQS will deliver it again", "err", err)
		}
		h.deleted.Store(true)
	}
	return nil
}

// changeVisibility applies visibility changes (nacks, releases,
// extensions) in calls of ten. A receipt that no longer works marks its
// handle dead; a call that failed, or entries worth trying again, make an
// error for the shared layer to retry (changing a visibility again does
// no harm).
func (d *subDriver) changeVisibility(ctx context.Context, vis []visChange) error {
	var errs []error
	for url, group := range byQueue(vis, func(v visChange) string { return v.h.queueURL }) {
		errs = append(errs, inChunks(len(group), func(lo, hi int) error {
			part := group[lo:hi]
			if d.noBatchVis.Load() {
				return d.visibilitySingles(ctx, url, part)
			}
			entries := make([]sqstypes.ChangeMessageVisibilityBatchRequestEntry, len(part))
			for i, v := range part {
				entries[i] = sqstypes.ChangeMessageVisibilityBatchRequestEntry{
					Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(v.h.receipt), VisibilityTimeout: v.secs}
			}
			out, err := d.c.sqs.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: entries})
			if err != nil {
				if isUnsupported(err) {
					d.noBatchVis.Store(true)
					d.log.Info("relay/sqs: the service has no ChangeMessageVisibilityBatch; changing visibility one message per call")
					return d.visibilitySingles(ctx, url, part)
				}
				return fmt.Errorf("relay/sqs: changing the visibility of %d messages: %w", len(part), err)
			}
			retry := 0
			for _, f := range out.Failed {
				i, err := strconv.Atoi(aws.ToString(f.Id))
				if err != nil || i < 0 || i >= len(part) {
					continue
				}
				if isPermanentCode(aws.ToString(f.Code), f.SenderFault) {
					part[i].h.dead.Store(true)
					d.log.Debug("relay/sqs: visibility change refused", "code", aws.ToString(f.Code), "reason", aws.ToString(f.Message))
					continue
				}
				retry++
			}
			if retry > 0 {
				return fmt.Errorf("relay/sqs: %d of %d visibility changes failed", retry, len(part))
			}
			return nil
		}))
	}
	return errors.Join(errs...)
}

func (d *subDriver) visibilitySingles(ctx context.Context, url string, vis []visChange) error {
	for _, v := range vis {
		_, err := d.c.sqs.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(url), ReceiptHandle: aws.String(v.h.receipt), VisibilityTimeout: v.secs})
		if err != nil {
			if isInvalidHandle(err) || apiCode(err) != "" {
				v.h.dead.Store(true)
				d.log.Debug("relay/sqs: visibility change refused", "err", err)
				continue
			}
			return fmt.Errorf("relay/sqs: changing the visibility of a message: %w", err)
		}
	}
	return nil
}
