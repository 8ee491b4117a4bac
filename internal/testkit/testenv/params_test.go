package testenv

import "testing"

func TestWithParams(t *testing.T) {
	cases := []struct {
		base string
		kv   []string
		want string
	}{
		{"redis://127.0.0.1:6379/0", []string{"group", "g"}, "redis://127.0.0.1:6379/0?group=g"},
		{"amqp://u:p@h:5672/?inflight=4", []string{"inflight", "8", "group", "a b"}, "amqp://u:p@h:5672/?group=a+b&inflight=8"},
		{"nats://h:4222", nil, "nats://h:4222"},
	}
	for _, c := range cases {
		if got := WithParams(c.base, c.kv...); got != c.want {
			t.Errorf("WithParams(%q, %q) = %q, want %q", c.base, c.kv, got, c.want)
		}
	}
	odd := []string{"group", "g", "inflight"}
	for _, bad := range []func(){
		func() { WithParams("redis://h", odd...) },
		func() { WithParams("redis://h:99999999999/%zz") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("WithParams did not panic on a mistake in the test")
				}
			}()
			bad()
		}()
	}
}
