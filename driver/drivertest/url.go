package drivertest

// Checks of an adapter's URL parser against "one URL for both sides", for
// the adapter's own tests.

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-relay/relay"
)

// URLBothSides asserts, for raw (a URL that carries parameters of both sides
// of its scheme, including group=):
//   - relay.CheckURL and relay.CheckSubscriberURL accept it;
//   - a publisher and a subscriber both open from it (ctx bounds opening);
//   - with an unknown parameter added, both checks and both opens fail
//     with a *relay.URLError naming that parameter.
func URLBothSides(t *testing.T, ctx context.Context, raw string) {
	t.Helper()
	if err := relay.CheckURL(raw); err != nil {
		t.Errorf("CheckURL(%s): %v", raw, err)
	}
	if err := relay.CheckSubscriberURL(raw); err != nil {
		t.Errorf("CheckSubscriberURL(%s): %v", raw, err)
	}
	pub, err := relay.OpenPublisher(ctx, raw)
	if err != nil {
		t.Errorf("OpenPublisher(%s): %v", raw, err)
	} else {
		_ = pub.Close()
	}
	sub, err := relay.OpenSubscriber(ctx, raw)
	if err != nil {
		t.Errorf("OpenSubscriber(%s): %v", raw, err)
	} else {
		_ = sub.Close()
	}

	const unknown = "confrim"
	bad := raw + "&" + unknown + "=true"
	if !strings.Contains(raw, "?") {
		bad = raw + "?" + unknown + "=true"
	}
	URLNamesParam(t, "CheckURL", relay.CheckURL(bad), unknown)
	URLNamesParam(t, "CheckSubscriberURL", relay.CheckSubscriberURL(bad), unknown)
	if pub, err := relay.OpenPublisher(ctx, bad); err == nil {
		_ = pub.Close()
		t.Errorf("OpenPublisher(%s) opened", bad)
	} else {
		URLNamesParam(t, "OpenPublisher", err, unknown)
	}
	if sub, err := relay.OpenSubscriber(ctx, bad); err == nil {
		_ = sub.Close()
		t.Errorf("OpenSubscriber(%s) opened", bad)
	} else {
		URLNamesParam(t, "OpenSubscriber", err, unknown)
	}
}

// URLNamesParam asserts that err holds a *relay.URLError whose Param is param
// (among joined errors too).
func URLNamesParam(t *testing.T, what string, err error, param string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want one naming parameter %q", what, param)
		return
	}
	if !errors.Is(err, relay.ErrBadURL) {
		t.Errorf("%s: %v does not match relay.ErrBadURL", what, err)
	}
	for _, e := range flattenErrs(err) {
		var ue *relay.URLError
		if errors.As(e, &ue) && ue.Param == param {
			return
		}
	}
	t.Errorf("%s: %v: no *relay.URLError with Param %q", what, err, param)
}

func flattenErrs(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flattenErrs(e)...)
		}
		return out
	}
	return []error{err}
}
