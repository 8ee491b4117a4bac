package router_test

import (
	"io"
	"sync/atomic"
	"testing"

	"github.com/go-relay/relay/router"
)

// closerFunc is an io.Closer of func type: not comparable, so it cannot be
// a map key.
type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// multiCloser is an io.Closer of slice type with a value receiver: not
// comparable either.
type multiCloser []io.Closer

func (m multiCloser) Close() error {
	for _, c := range m {
		_ = c.Close()
	}
	return nil
}

// wrapper is a comparable struct holding a non-comparable closer: == on
// two wrappers panics at run time.
type wrapper struct{ io.Closer }

type countCloser struct{ n atomic.Int32 }

func (c *countCloser) Close() error { c.n.Add(1); return nil }

// TestOwnNonComparable: values whose dynamic type cannot be a map key are
// closed exactly once, comparable ones handed twice are still closed once,
// and Close does not panic.
func TestOwnNonComparable(t *testing.T) {
	for _, stopped := range []bool{false, true} {
		r, err := router.New(router.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if stopped {
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
		}
		var fn atomic.Int32
		inSlice, inWrapper, shared := &countCloser{}, &countCloser{}, &countCloser{}
		r.Own(
			closerFunc(func() error { fn.Add(1); return nil }),
			multiCloser{inSlice},
			shared,
			wrapper{multiCloser{inWrapper}},
			shared,
		)
		if !stopped {
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
		}
		for name, n := range map[string]int32{
			"func closer":            fn.Load(),
			"slice closer":           inSlice.n.Load(),
			"struct holding a slice": inWrapper.n.Load(),
			"pointer owned twice":    shared.n.Load(),
		} {
			if n != 1 {
				t.Errorf("stopped=%v: %s closed %d times, want 1", stopped, name, n)
			}
		}
	}
}
