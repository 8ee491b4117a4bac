package driver

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/go-relay/relay"
)

// TestSendError covers the one rule every adapter reports a send's
// failures by: the plain error only when all messages failed with one
// error that is not about the messages themselves.
func TestSendError(t *testing.T) {
	down := errors.New("connection refused")
	unroutable := errors.New("unroutable")
	perMessage := func(err error) bool { return errors.Is(err, unroutable) }
	fails := func(errs ...error) []relay.MessageFailure {
		var f []relay.MessageFailure
		for i, err := range errs {
			f = append(f, relay.MessageFailure{ID: fmt.Sprint("m", i), Err: err})
		}
		return f
	}
	cases := []struct {
		name       string
		n          int
		failed     []relay.MessageFailure
		perMessage func(error) bool
		plain      error    // want this error itself
		named      []string // else want a *relay.PublishError naming these
	}{
		{name: "none failed", n: 3},
		{name: "all with one error", n: 3, failed: fails(down, down, down), plain: down},
		{name: "all with one text, wrapped apart", n: 2,
			failed: fails(fmt.Errorf("relay/x: %w", down), fmt.Errorf("relay/x: %w", down))},
		{name: "all with one text, one marked Retryable", n: 2, failed: fails(Retryable(down), down),
			named: []string{"m0", "m1"}},
		{name: "all with one text, errors not comparable", n: 2,
			failed: fails(sliceError{[]string{"a"}}, sliceError{[]string{"a"}})},
		{name: "all, two causes", n: 2, failed: fails(down, errors.New("timeout")), named: []string{"m0", "m1"}},
		{name: "some", n: 3, failed: fails(down, down), named: []string{"m0", "m1"}},
		{name: "all about the message", n: 2, failed: fails(unroutable, unroutable), perMessage: perMessage,
			named: []string{"m0", "m1"}},
		{name: "all with one error, a classifier given", n: 2, failed: fails(down, down), perMessage: perMessage,
			plain: down},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := SendError(c.n, c.failed, c.perMessage)
			switch {
			case len(c.failed) == 0:
				if err != nil {
					t.Fatalf("SendError = %v, want nil", err)
				}
				return
			case c.plain != nil:
				if err != c.plain {
					t.Fatalf("SendError = %#v, want the plain %v", err, c.plain)
				}
				return
			case c.named == nil: // one text: the first failure's error
				// (by text and type: == would panic on sliceError)
				if _, isPE := err.(*relay.PublishError); isPE || err.Error() != c.failed[0].Err.Error() {
					t.Fatalf("SendError = %#v, want the first failure's error", err)
				}
				return
			}
			var pe *relay.PublishError
			if !errors.As(err, &pe) {
				t.Fatalf("SendError = %v, want a *relay.PublishError", err)
			}
			var ids []string
			for _, f := range pe.Failed {
				ids = append(ids, f.ID)
			}
			if !slices.Equal(ids, c.named) {
				t.Fatalf("PublishError names %v, want %v", ids, c.named)
			}
		})
	}
}

// sliceError is an error of a non-comparable type: == on two of them panics.
type sliceError struct{ parts []string }

func (e sliceError) Error() string { return fmt.Sprint(e.parts) }
