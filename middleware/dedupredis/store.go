// Package dedupredis is a middleware.Store on Redis, shared by every
// replica of a service so that middleware.Dedup suppresses duplicates
// across them.
//
// Each key is one Redis string under a prefix:
//
//   - Reserve: SET key token NX PX lease (atomic; in a script that also
//     reads the existing value, so one round trip tells Reserved, InProgress
//     or Done, and a key this token holds already is Reserved again);
//   - Commit: SET key "done" PX ttl (extends the key's life to the TTL);
//   - Release: delete key only if it still holds this token (a
//     compare-and-delete script), so a late release never removes another
//     replica's reservation or a committed key.
//
// The batch methods (middleware.BatchStore) send the same commands for
// every key in one pipeline: one round trip per call on a single server,
// one per shard holding a key on a cluster.
//
// Redis evicting keys under memory pressure (maxmemory-policy other than
// noeviction) or losing them on restart without persistence shortens the
// dedup window: a duplicate then runs again, it is never lost.
package dedupredis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-relay/relay/middleware"
)

// DefaultPrefix is prepended to every key unless Config.Prefix is set.
const DefaultPrefix = "relay:dedup:"

const doneValue = "done" // tokens are 32 hex digits, never "done"

// Config configures a Store.
type Config struct {
	// Prefix is prepended to every key (namespace per service or
	// environment). Default DefaultPrefix.
	Prefix string
}

// Store is a middleware.Store on Redis. It uses the client it is given and
// does not close it. Safe for concurrent use.
type Store struct {
	c      redis.UniversalClient
	prefix string
}

var _ middleware.BatchStore = (*Store)(nil)

// New returns a Store using client (a *redis.Client, *redis.ClusterClient
// or any redis.UniversalClient).
func New(client redis.UniversalClient, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("dedupredis: client is nil")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	return &Store{c: client, prefix: cfg.Prefix}, nil
}

// reserve: 0 reserved, 1 in progress, 2 done.
// The key held by the same token again counts as reserved (the lease
// renewed), so that a call the client sent twice (go-redis retries a
// pipeline after a read timeout) does not see its own reservation as
// another holder's.
var reserveScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
local v = redis.call('GET', KEYS[1])
if v == ARGV[3] then
  return 2
end
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 0
end
return 1
`)

var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

func ms(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// Reserve implements middleware.Store.
func (s *Store) Reserve(ctx context.Context, key, token string, lease time.Duration) (middleware.DedupState, error) {
	n, err := reserveScript.Run(ctx, s.c, []string{s.prefix + key}, token, ms(lease), doneValue).Int()
	if err != nil {
		return 0, fmt.Errorf("dedupredis: reserve: %w", err)
	}
	return reserveState(n), nil
}

// reserveState maps reserveScript's answer to a state.
func reserveState(n int) middleware.DedupState {
	switch n {
	case 0:
		return middleware.Reserved
	case 2:
		return middleware.Done
	}
	return middleware.InProgress
}

// Commit implements middleware.Store.
func (s *Store) Commit(ctx context.Context, key, _ string, ttl time.Duration) error {
	if err := s.c.Set(ctx, s.prefix+key, doneValue, time.Duration(ms(ttl))*time.Millisecond).Err(); err != nil {
		return fmt.Errorf("dedupredis: commit: %w", err)
	}
	return nil
}

// Release implements middleware.Store.
func (s *Store) Release(ctx context.Context, key, token string) error {
	if err := releaseScript.Run(ctx, s.c, []string{s.prefix + key}, token).Err(); err != nil {
		return fmt.Errorf("dedupredis: release: %w", err)
	}
	return nil
}

// ReserveBatch implements middleware.BatchStore.
func (s *Store) ReserveBatch(ctx context.Context, keys []string, token string, lease time.Duration) ([]middleware.DedupState, error) {
	cmds, err := s.runEach(ctx, reserveScript, keys, token, ms(lease), doneValue)
	if err != nil {
		return nil, fmt.Errorf("dedupredis: reserve %d keys: %w", len(keys), err)
	}
	states := make([]middleware.DedupState, len(keys))
	for i, c := range cmds {
		n, err := c.Int()
		if err != nil {
			return nil, fmt.Errorf("dedupredis: reserve %d keys: %w", len(keys), err)
		}
		states[i] = reserveState(n)
	}
	return states, nil
}

// CommitBatch implements middleware.BatchStore.
func (s *Store) CommitBatch(ctx context.Context, keys []string, _ string, ttl time.Duration) error {
	ttl = time.Duration(ms(ttl)) * time.Millisecond
	_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Set(ctx, s.prefix+k, doneValue, ttl)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("dedupredis: commit %d keys: %w", len(keys), err)
	}
	return nil
}

// ReleaseBatch implements middleware.BatchStore.
func (s *Store) ReleaseBatch(ctx context.Context, keys []string, token string) error {
	if _, err := s.runEach(ctx, releaseScript, keys, token); err != nil {
		return fmt.Errorf("dedupredis: release %d keys: %w", len(keys), err)
	}
	return nil
}

// runEach runs script once per key, in one pipeline of EVALSHA. Keys
// that Redis answers with NOSCRIPT (its script cache was flushed, or it
// restarted) are sent again with the script's source, in a second
// pipeline, as Script.Run does for one key; they are sent again even when
// other keys failed otherwise (another shard of a cluster), and those
// failures are returned.
func (s *Store) runEach(ctx context.Context, script *redis.Script, keys []string, args ...any) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(keys))
	_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = script.EvalSha(ctx, p, []string{s.prefix + k}, args...)
		}
		return nil
	})
	if err == nil {
		return cmds, nil
	}
	var again []int
	var failed error
	for i, c := range cmds {
		switch err := c.Err(); {
		case err == nil:
		case errors.Is(err, redis.ErrNoScript), redis.HasErrorPrefix(err, "NOSCRIPT"):
			again = append(again, i)
		case failed == nil:
			failed = err
		}
	}
	if len(again) == 0 && failed == nil {
		return nil, err
	}
	if len(again) > 0 {
		_, err = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range again {
				cmds[i] = script.Eval(ctx, p, []string{s.prefix + keys[i]}, args...)
			}
			return nil
		})
		failed = errors.Join(failed, err)
	}
	if failed != nil {
		return nil, failed
	}
	return cmds, nil
}
