package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ReserveAll reserves keys (no key twice) for token on s: in one call
// when s is a BatchStore, else one Reserve per key. errs[i] is why keys[i]
// was not reserved (nil when states[i] is its outcome). When the one
// batch call fails, or answers a state count other than len(keys), every
// key fails with that error and the keys it may have reserved are
// released first, so that none stays held for a lease.
func ReserveAll(ctx context.Context, s Store, keys []string, token string, lease time.Duration) (states []DedupState, errs []error) {
	states, errs = make([]DedupState, len(keys)), make([]error, len(keys))
	bs, ok := s.(BatchStore)
	if !ok || len(keys) < 2 {
		for i, k := range keys {
			states[i], errs[i] = s.Reserve(ctx, k, token, lease)
		}
		return states, errs
	}
	got, err := bs.ReserveBatch(ctx, keys, token, lease)
	if err == nil && len(got) != len(keys) {
		err = fmt.Errorf("dedup: ReserveBatch answered %d states for %d keys", len(got), len(keys))
	}
	if err != nil {
		_ = ReleaseAll(context.WithoutCancel(ctx), s, keys, token)
		for i := range errs {
			errs[i] = err
		}
		return states, errs
	}
	return got, errs
}

// CommitAll marks keys done for ttl on s: in one call when s is a
// BatchStore, else one Commit per key (all of them tried; the errors
// joined).
func CommitAll(ctx context.Context, s Store, keys []string, token string, ttl time.Duration) error {
	if bs, ok := s.(BatchStore); ok && len(keys) > 1 {
		return bs.CommitBatch(ctx, keys, token, ttl)
	}
	var errs []error
	for _, k := range keys {
		errs = append(errs, s.Commit(ctx, k, token, ttl))
	}
	return errors.Join(errs...)
}

// ReleaseAll drops token's reservations of keys on s: in one call when s
// is a BatchStore, else one Release per key (all of them tried; the
// errors joined).
func ReleaseAll(ctx context.Context, s Store, keys []string, token string) error {
	if bs, ok := s.(BatchStore); ok && len(keys) > 1 {
		return bs.ReleaseBatch(ctx, keys, token)
	}
	var errs []error
	for _, k := range keys {
		errs = append(errs, s.Release(ctx, k, token))
	}
	return errors.Join(errs...)
}
