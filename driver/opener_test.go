package driver_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
)

type openerConf struct {
	group string
	conn  *fakeConn
}

type fakeConn struct{ closed bool }

type nilPublisher struct{ relay.Publisher }

func newTestOpener(connectErr, buildErr error, conns *[]*fakeConn) *driver.Opener[openerConf] {
	return &driver.Opener[openerConf]{
		Backend: "fake",
		Parse: func(u *url.URL, subscriber bool) (openerConf, error) {
			c := openerConf{group: u.Query().Get("group")}
			if subscriber && c.group == "" {
				return c, &relay.URLError{URL: relay.Redact(u.String()), Param: "group", Reason: "required"}
			}
			return c, nil
		},
		Connect: func(_ context.Context, c *openerConf) error {
			if connectErr != nil {
				return connectErr
			}
			c.conn = &fakeConn{}
			*conns = append(*conns, c.conn)
			return nil
		},
		Disconnect: func(c openerConf) { c.conn.closed = true },
		NewPublisher: func(_ context.Context, c openerConf) (relay.Publisher, error) {
			var p *nilPublisher // a nil pointer: must not come back as a non-nil interface
			return p, buildErr
		},
		NewSubscriber: func(_ context.Context, c openerConf) (relay.Subscriber, error) {
			if buildErr != nil {
				return nil, buildErr
			}
			return nil, relay.ErrNotSupported
		},
		Defaults: relay.URLDefaults{SourceWindow: 9},
	}
}

// Parse errors come back as they are; connect and constructor errors name
// the backend and the URL without its password, once; a failed
// constructor's connection is closed; a failed Open returns a nil
// interface.
func TestOpener(t *testing.T) {
	u, _ := url.Parse("fake://user:secret@h:1/?x=1")
	var conns []*fakeConn

	o := newTestOpener(nil, nil, &conns)
	if err := o.CheckURL(u); err != nil {
		t.Fatalf("CheckURL: %v", err)
	}
	var ue *relay.URLError
	if err := o.CheckSubscriberURL(u); !errors.As(err, &ue) || ue.Param != "group" {
		t.Fatalf("CheckSubscriberURL: %v, want the parser's *relay.URLError about group", err)
	}
	if _, err := o.OpenSubscriber(context.Background(), u); !errors.As(err, &ue) || strings.HasPrefix(err.Error(), "relay/fake") {
		t.Fatalf("OpenSubscriber: %v, want the parser's error as it is", err)
	}
	if len(conns) != 0 {
		t.Fatal("connected although the URL did not parse")
	}
	if d := o.URLDefaults(); d.SourceWindow != 9 {
		t.Fatalf("URLDefaults %+v", d)
	}

	down := errors.New("connection refused")
	o = newTestOpener(down, nil, &conns)
	_, err := o.OpenPublisher(context.Background(), u)
	if !errors.Is(err, down) || !strings.HasPrefix(err.Error(), "relay/fake: fake://user:") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("connect error: %v", err)
	}

	refused := errors.New("server too old")
	o = newTestOpener(nil, refused, &conns)
	pub, err := o.OpenPublisher(context.Background(), u)
	if pub != nil || !errors.Is(err, refused) {
		t.Fatalf("OpenPublisher = %v, %v; want a nil interface and the constructor's error", pub, err)
	}
	if len(conns) != 1 || !conns[0].closed {
		t.Fatal("the connection of a failed constructor was not closed")
	}
	named := errors.New("relay/fake: connecting to h:1: refused")
	o = newTestOpener(nil, named, &conns)
	if _, err := o.OpenSubscriber(context.Background(), mustURL("fake://h:1?group=g")); err == nil || err.Error() != named.Error() {
		t.Fatalf("an error naming the backend was wrapped again: %v", err)
	}
}

func mustURL(raw string) *url.URL {
	u, err := url.Parse(raw)
	if err != nil {
		panic(err)
	}
	return u
}
