package relay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-relay/relay"
	_ "github.com/go-relay/relay/adapters/amqp"
	_ "github.com/go-relay/relay/adapters/kafka"
	_ "github.com/go-relay/relay/adapters/memory"
	_ "github.com/go-relay/relay/adapters/redisstream"
	_ "github.com/go-relay/relay/adapters/sqs"
)

// Secrets the fuzzer plants in every URL; no error text may contain them.
const (
	fuzzPassword = "Pw9sEcReTuser"
	fuzzSecret   = "Zq7sEcReTparam"
)

// secretParamNames are the query parameters the adapters treat as secrets.
var secretParamNames = []string{"password", "sasl_password", "secret_key", "session_token", "token", "secret"}

// FuzzOpenURL checks (relay.CheckURL, relay.CheckSubscriberURL) and opens
// publishers and subscribers for every registered scheme with a fuzzed
// path and query, a password in the user info and a secret query
// parameter. Opening must return a value or an error, never panic, and no
// error text may contain either secret. The host is a closed local
// port so that a URL that parses cleanly fails fast at connecting.
func FuzzOpenURL(f *testing.F) {
	f.Add(uint8(0), "/", "group=g", uint8(0), true)
	f.Add(uint8(1), "/vhost", "group=g&prefetch=x&unknown=1", uint8(1), false)
	f.Add(uint8(2), "", "group=g&seed=127.0.0.1:1&sasl_mechanism=PLAIN", uint8(1), true)
	f.Add(uint8(3), "/0", "group=&inflight=-1&inflight=2", uint8(2), true)
	f.Add(uint8(4), "", "region=us-east-1&endpoint=http://127.0.0.1:1&group=g", uint8(2), false)
	f.Add(uint8(5), "/%zz", "%zz=%", uint8(3), true)
	f.Add(uint8(3), "#x@h:1/", "group=g", uint8(0), true)
	f.Add(uint8(2), "/x@h", "@&group=g", uint8(1), false)
	schemes := relay.Schemes()
	f.Fuzz(func(t *testing.T, scheme uint8, path, query string, secretParam uint8, subscriber bool) {
		if strings.Contains(path+query, "sEcReT") {
			t.Skip("the fuzzed part itself holds the planted secret")
		}
		s := schemes[int(scheme)%len(schemes)]
		param := secretParamNames[int(secretParam)%len(secretParamNames)]
		q := query
		if q != "" {
			q += "&"
		}
		q += param + "=" + fuzzSecret
		raw := s + "://user:" + fuzzPassword + "@127.0.0.1:1" + path + "?" + q
		check := relay.CheckURL
		if subscriber {
			check = relay.CheckSubscriberURL
		}
		if err := check(raw); err != nil {
			if msg := err.Error(); strings.Contains(msg, fuzzPassword) || strings.Contains(msg, fuzzSecret) {
				t.Fatalf("check error leaks a secret:\nURL   %s\nerror %s", raw, msg)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		var (
			closer interface{ Close() error }
			err    error
		)
		if subscriber {
			var sub relay.Subscriber
			sub, err = relay.OpenSubscriber(ctx, raw)
			if sub != nil {
				closer = sub
			}
		} else {
			var pub relay.Publisher
			pub, err = relay.OpenPublisher(ctx, raw)
			if pub != nil {
				closer = pub
			}
		}
		if err == nil && closer == nil {
			t.Fatalf("%s: nil value and nil error", raw)
		}
		if err != nil && closer != nil {
			t.Fatalf("%s: both a value and an error (%v)", raw, err)
		}
		if closer != nil {
			_ = closer.Close()
			return
		}
		if msg := err.Error(); strings.Contains(msg, fuzzPassword) || strings.Contains(msg, fuzzSecret) {
			t.Fatalf("error leaks a secret:\nURL   %s\nerror %s", raw, msg)
		}
	})
}
