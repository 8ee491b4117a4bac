package watermill_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/go-relay/relay"
	wm "github.com/go-relay/relay/compat/watermill"
)

func init() {
	wm.Register("strict-test", wm.Opener{
		NewPublisher: func(ctx context.Context, u *url.URL) (message.Publisher, error) {
			return client{shared}, nil
		},
		NewSubscriber: func(ctx context.Context, u *url.URL, group string) (message.Subscriber, error) {
			if u.Query().Get("fail") != "" {
				return nil, errors.New("factory refused")
			}
			return client{shared}, nil
		},
		Params:       []string{"fail"},
		RequireGroup: true,
	})
}

func TestRegisteredURL(t *testing.T) {
	for _, tc := range []struct {
		url, param string
		sub        bool
	}{
		{"watermill+strict-test://?nope=1", "nope", false},
		{"watermill+strict-test://?group=g&nope=1", "nope", true},
		{"watermill+strict-test://", "group", true},
		{"watermill+strict-test://?group=g&inflight=0", "inflight", true},
		{"watermill+strict-test://?group=g&inflight_bytes=lots", "inflight_bytes", true},
		{"watermill+strict-test://?group=a&group=b", "group", true},
	} {
		check, open := relay.CheckURL, func() error {
			p, err := relay.OpenPublisher(context.Background(), tc.url)
			if err == nil {
				_ = p.Close()
			}
			return err
		}
		if tc.sub {
			check, open = relay.CheckSubscriberURL, func() error {
				s, err := relay.OpenSubscriber(context.Background(), tc.url)
				if err == nil {
					_ = s.Close()
				}
				return err
			}
		}
		for what, err := range map[string]error{"check": check(tc.url), "open": open()} {
			var ue *relay.URLError
			if !errors.As(err, &ue) || ue.Param != tc.param {
				t.Errorf("%s %s: %v, want a *relay.URLError naming %q", what, tc.url, err, tc.param)
			}
		}
	}
	if err := relay.CheckSubscriberURL("watermill+strict-test://?group=g&inflight=2&fail="); err != nil {
		t.Errorf("valid URL: %v", err)
	}
	_, err := relay.OpenSubscriber(context.Background(), "watermill+strict-test://?group=g&fail=1")
	if err == nil || !strings.Contains(err.Error(), "factory refused") || !strings.HasPrefix(err.Error(), "relay/watermill:") {
		t.Errorf("factory error: %v, want it wrapped with the relay/watermill prefix", err)
	}
	s, err := relay.OpenSubscriber(context.Background(), "watermill+strict-test://?group=g")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if b := s.(relay.CapabilityReporter).Capabilities().Backend; b != "watermill+strict-test" {
		t.Errorf("Backend %q, want the scheme", b)
	}
}

func TestRegisterRejects(t *testing.T) {
	ok := wm.Opener{NewPublisher: func(context.Context, *url.URL) (message.Publisher, error) { return client{shared}, nil }}
	for name, o := range map[string]wm.Opener{"Bad_Name": ok, "9lives": ok, "no-factory": {}, "strict-test": ok} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q) did not panic", name)
				}
			}()
			wm.Register(name, o)
		}()
	}
}
