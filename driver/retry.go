package driver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver/backoff"
)

// retryableError marks an error as worth sending again (see Retryable).
type retryableError struct{ err error }

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// Retryable marks err, an outcome of one SendBatch or SendAll attempt, as
// worth sending again: a passing fault (connection down, broker
// restarting, throttling, no answer in time) after which the same
// messages may well be accepted. Returned as the whole call's error, it
// says that none of the batch was accepted for sure and that the whole
// batch may be sent again; as the Err of an entry of a *relay.PublishError,
// that this message may be sent again. The shared Publisher then sends
// exactly those messages again, with backoff, until they are accepted or
// the Publish ctx ends (see PublishDriver). errors.Is and errors.As see
// err through the mark. Mark the error as it is returned (the outermost
// wrap): the Publisher takes the mark off what it reports. Retryable(nil)
// is nil.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	var r *retryableError
	if errors.As(err, &r) {
		return err
	}
	return &retryableError{err: err}
}

// IsRetryable reports whether err (or an error it wraps) was marked by
// Retryable.
func IsRetryable(err error) bool {
	var r *retryableError
	return errors.As(err, &r)
}

// unmark is err without the mark of Retryable on top.
func unmark(err error) error {
	if r, ok := err.(*retryableError); ok {
		return r.err
	}
	return err
}

// gaveUp is the error of a message that was still to be sent again when
// ctx ended: it names ctx's error and the last one the broker gave, and
// wraps both.
func (p *Publisher) gaveUp(ctx context.Context, last error) error {
	return fmt.Errorf("relay/%s: %w (last error: %w)", p.caps.Backend, ctx.Err(), unmark(last))
}

// sleepCtx waits d or until ctx is done; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// attemptFunc is one SendBatch or SendAll call.
type attemptFunc func(ctx context.Context, topic string, msgs []*relay.Message) error

// sendRetrying sends batch with attempt and sends again, with the
// Publisher's one backoff policy, the messages the driver marked
// Retryable, until none is left or ctx ends. It returns the messages that
// failed for good, or whole: the one error that failed the whole batch
// (nothing of it was accepted and no message failed on its own).
func (p *Publisher) sendRetrying(ctx context.Context, topic string, batch []*relay.Message, attempt attemptFunc) (failed []relay.MessageFailure, whole error) {
	pending := batch
	var bo backoff.Backoff // the receive side's policy: 100ms doubling to 5s, jittered
	var last map[string]error
	var lastWhole error // the last attempt failed as a whole with this retryable error
	for {
		err := attempt(ctx, topic, pending)
		if err == nil {
			return failed, nil
		}
		var pe *relay.PublishError
		if !errors.As(err, &pe) {
			if !IsRetryable(err) {
				if len(failed) == 0 && len(pending) == len(batch) {
					return nil, err
				}
				return appendFailed(failed, pending, err), nil
			}
			lastWhole, last = err, nil
		} else {
			lastWhole = nil
			last = make(map[string]error, len(pe.Failed))
			for _, f := range pe.Failed {
				if IsRetryable(f.Err) {
					last[f.ID] = f.Err
				} else {
					failed = append(failed, f)
				}
			}
			next := make([]*relay.Message, 0, len(last))
			found := make(map[string]bool, len(last))
			for _, m := range pending {
				if _, ok := last[m.ID]; ok {
					next = append(next, m)
					found[m.ID] = true
				}
			}
			for _, f := range pe.Failed {
				if _, ok := last[f.ID]; ok && !found[f.ID] {
					// Not one of the messages sent: report it as it is.
					failed = append(failed, relay.MessageFailure{ID: f.ID, Err: unmark(f.Err)})
					delete(last, f.ID)
				}
			}
			pending = next
			if len(pending) == 0 {
				return failed, nil
			}
		}
		if ctx.Err() != nil || !p.pause(ctx, bo.Next()) {
			if lastWhole != nil {
				err := p.gaveUp(ctx, lastWhole)
				if len(failed) == 0 && len(pending) == len(batch) {
					return nil, err
				}
				return appendFailed(failed, pending, err), nil
			}
			for _, m := range pending {
				failed = append(failed, relay.MessageFailure{ID: m.ID, Err: p.gaveUp(ctx, last[m.ID])})
			}
			return failed, nil
		}
	}
}

func appendFailed(failed []relay.MessageFailure, msgs []*relay.Message, err error) []relay.MessageFailure {
	for _, m := range msgs {
		failed = append(failed, relay.MessageFailure{ID: m.ID, Err: err})
	}
	return failed
}

// SendError is what a SendBatch, SendAll or SendBatchAsync outcome
// reports for one send of n messages, of which failed did not make it
// (in the batch's order): nil when none failed; the plain error when all
// n failed with errors of one text and one Retryable mark that
// perMessage does not claim (the connection down, the broker refusing
// the call: nothing about any one message, so the caller gets the cause
// itself); otherwise a *relay.PublishError naming each failed message.
// perMessage reports the errors that belong to their message even when
// every message has one (unroutable, rejected, too large); nil means
// none does. The adapters of this module that can fail part of a send
// report through it, so that one rule decides between the two shapes.
func SendError(n int, failed []relay.MessageFailure, perMessage func(error) bool) error {
	if len(failed) == 0 {
		return nil
	}
	first := failed[0].Err
	if len(failed) == n && first != nil && (perMessage == nil || !perMessage(first)) {
		text, retry := first.Error(), IsRetryable(first)
		same := true
		for _, f := range failed[1:] {
			// By text, not ==: comparing errors of a non-comparable
			// dynamic type (a struct holding a slice) would panic.
			if f.Err == nil || f.Err.Error() != text || IsRetryable(f.Err) != retry {
				same = false
				break
			}
		}
		if same {
			return first
		}
	}
	return &relay.PublishError{Failed: failed}
}
