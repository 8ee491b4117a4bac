package middleware_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/middleware"
	"github.com/go-relay/relay/router"
)

func TestCorrelationIDPropagates(t *testing.T) {
	var inCtx string
	h := middleware.CorrelationID(func(ctx context.Context, m *relay.Message) ([]*relay.Message, error) {
		inCtx = middleware.CorrelationIDFrom(ctx)
		keep := relay.NewMessage(nil)
		keep.Metadata = relay.Metadata{middleware.CorrelationIDKey: "own"}
		return []*relay.Message{relay.NewMessage(nil), keep}, nil
	})
	// A message without a correlation ID starts a chain with its own ID.
	first := relay.NewMessage(nil)
	outs, _ := h(handlerCtx(), first)
	if inCtx != first.ID || outs[0].Metadata.Get(middleware.CorrelationIDKey) != first.ID {
		t.Fatalf("ctx %q, output %q, want %q", inCtx, outs[0].Metadata.Get(middleware.CorrelationIDKey), first.ID)
	}
	if outs[1].Metadata.Get(middleware.CorrelationIDKey) != "own" {
		t.Fatal("overwrote an output's own correlation ID")
	}
	// A message that carries one passes it on.
	next := outs[0]
	outs2, _ := h(handlerCtx(), next)
	if outs2[0].Metadata.Get(middleware.CorrelationIDKey) != first.ID {
		t.Fatal("correlation ID not carried through a second hop")
	}
	if middleware.CorrelationIDFrom(context.Background()) != "" {
		t.Fatal("ID outside CorrelationID")
	}
}

func TestRecovererTurnsPanicIntoError(t *testing.T) {
	boom := errors.New("boom")
	h := middleware.Recoverer(func(context.Context, *relay.Message) ([]*relay.Message, error) { panic(boom) })
	outs, err := h(handlerCtx(), relay.NewMessage(nil))
	var pe *router.PanicError
	if outs != nil || !errors.As(err, &pe) || !errors.Is(err, boom) || !strings.Contains(string(pe.Stack), "misc_test.go") {
		t.Fatalf("err %v", err)
	}
}

func TestTimeout(t *testing.T) {
	var deadline time.Time
	var ok bool
	h := middleware.Timeout(time.Minute)(func(ctx context.Context, _ *relay.Message) ([]*relay.Message, error) {
		deadline, ok = ctx.Deadline()
		return nil, nil
	})
	before := time.Now()
	_, _ = h(handlerCtx(), relay.NewMessage(nil))
	if !ok || deadline.Before(before.Add(time.Minute)) {
		t.Fatalf("deadline %v, %v", deadline, ok)
	}
	off := middleware.Timeout(0)(func(ctx context.Context, _ *relay.Message) ([]*relay.Message, error) {
		_, ok = ctx.Deadline()
		return nil, nil
	})
	_, _ = off(handlerCtx(), relay.NewMessage(nil))
	if ok {
		t.Fatal("Timeout(0) set a deadline")
	}
}
