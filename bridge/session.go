package bridge

import (
	"errors"
	"fmt"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/router"
)

// session is one connected run of a route.
type session struct {
	pubH relay.HealthChecker
	subH relay.HealthChecker
	subA relay.AssignmentReporter
	rt   *router.Router
}

// holds is what the session's member holds of topic: the source's
// relay.Assignment, or competing when it cannot tell.
func (s *session) holds(topic string) *HoldsStatus {
	h := &HoldsStatus{Mode: relay.ShareCompeting}
	if s.subA == nil {
		return h
	}
	a, err := s.subA.Assignment(topic)
	if err != nil {
		return h
	}
	h.Mode = a.Mode
	switch a.Mode {
	case relay.SharePartitions:
		h.Partitions = a.Partitions
	case relay.ShareSingleActive:
		h.Active = &a.Active
	}
	return h
}

// maxFences is how many fences in a row, with nothing forwarded in
// between, a route takes before it gives up (see fenced).
const maxFences = 3

// fenced handles a fenced session (relay.ErrFenced, err): the route's
// state is StateFenced (not ready) until a new session subscribes, which
// run opens at once, with a new producer epoch and group membership. It
// returns an ErrUnrecoverable error instead when a new session cannot
// help: another live instance has the same identity (relay.ErrTakenOver),
// or the route was fenced maxFences times in a row without forwarding.
func (r *route) fenced(err error, inARow int) error {
	r.setErr(err)
	switch {
	case errors.Is(err, relay.ErrTakenOver):
		r.log.Error("route fenced by another instance with the same identity; stopping (give every replica its own)", "err", err)
		return fmt.Errorf("%w: %w", ErrUnrecoverable, err)
	case inARow >= maxFences:
		r.log.Error("route fenced again and again without forwarding; stopping", "fences", inARow, "err", err)
		return fmt.Errorf("%w: fenced %d times in a row without forwarding: %w", ErrUnrecoverable, inARow, err)
	}
	r.phase.Store(phaseFenced)
	r.log.Warn("route fenced; it left the group and opens a new session", "err", err, "fences_in_a_row", inARow)
	return nil
}

// subscribed reports whether the session's router runs: subscribed to
// the source and not stopped.
func (s *session) subscribed() bool {
	select {
	case <-s.rt.Running():
	default:
		return false
	}
	select {
	case <-s.rt.Done():
		return false
	default:
		return true
	}
}

// fenced reports whether the session's source says it was fenced
// (relay.ErrFenced): it ends its subscription, and the route opens another.
func (s *session) fenced() bool {
	return s.subH != nil && errors.Is(s.subH.Health(), relay.ErrFenced)
}

func (s *session) sourceErr() error {
	select {
	case <-s.rt.Running():
	default:
		return errors.New("not subscribed yet")
	}
	select {
	case <-s.rt.Done():
		return errors.New("stopped")
	default:
	}
	if s.subH != nil {
		return s.subH.Health()
	}
	return nil
}

func (s *session) destErr() error {
	if s.pubH != nil {
		return s.pubH.Health()
	}
	return nil
}

// ready returns nil when the route's source is subscribed and both ends
// report a usable connection, or why not.
func (r *route) ready() error {
	if r.cut.drained.Load() && r.phase.Load() == phaseStopped {
		return nil // done on purpose (StopWhen)
	}
	src, dst := r.endpointErrs()
	if src != nil && src == dst {
		return src
	}
	if src != nil {
		return fmt.Errorf("source: %w", src)
	}
	if dst != nil {
		return fmt.Errorf("destination: %w", dst)
	}
	return nil
}

// endpointErrs returns why the source and the destination are not usable
// (nil when they are). Without a session both are the same error.
func (r *route) endpointErrs() (src, dst error) {
	r.mu.Lock()
	s, last := r.sess, r.lastErr
	r.mu.Unlock()
	if s == nil {
		err := errors.New("connecting")
		if last != nil {
			err = fmt.Errorf("not connected: %w", last)
		}
		return err, err
	}
	return s.sourceErr(), s.destErr()
}
