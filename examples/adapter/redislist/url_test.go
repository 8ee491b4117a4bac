package redislist_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-relay/relay"
)

func TestURL(t *testing.T) {
	for _, c := range []struct {
		url      string
		pub, sub string // "" = accepted, else a word of the error
	}{
		{"redislist://127.0.0.1:6379/0?group=g", "", ""},
		{"redislist://h/3?group=g&prefix=p:&inflight=8&block=1s&lease=10s", "", ""},
		{"redislist://127.0.0.1:6379/0", "", "group"},
		{"redislist://h/0?group=g&no_such_option=1", "no_such_option", "no_such_option"},
		{"redislist://h/0?group=a:b", "group", "group"},
		{"redislist://h/0?group=groups", "reserved", "reserved"},
		{"redislist://h/0?group=g&group=h", "more than once", "more than once"},
		{"redislist://h/0?inflight=0", "inflight", "inflight"},
		{"redislist://h/0?lease=10ms", "lease", "lease"},
		{"redislist://h/0?block=20s&lease=30s", "block", "block"},
		{"redislist://h/zero", "database number", "database number"},
		{"redislist://h/0?tls=true&tls_server_name=redis.internal", "", "group"},
		{"redislist://h/0?tls_cert=/c.pem", "tls_key", "tls_key"},
	} {
		for _, side := range []struct {
			name  string
			check func(string) error
			want  string
		}{{"publisher", relay.CheckURL, c.pub}, {"subscriber", relay.CheckSubscriberURL, c.sub}} {
			err := side.check(c.url)
			switch {
			case side.want == "" && err != nil:
				t.Errorf("%s %s: %v, want accepted", side.name, c.url, err)
			case side.want != "" && err == nil:
				t.Errorf("%s %s: accepted, want an error about %s", side.name, c.url, side.want)
			case side.want != "" && (!errors.Is(err, relay.ErrBadURL) || !strings.Contains(err.Error(), side.want)):
				t.Errorf("%s %s: %v, want a *relay.URLError about %s", side.name, c.url, err, side.want)
			}
		}
	}
}
