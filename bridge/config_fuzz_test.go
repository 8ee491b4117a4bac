package bridge_test

import (
	"errors"
	"testing"

	"github.com/go-relay/relay/bridge"
)

// FuzzParse feeds the bridge's YAML loader arbitrary documents (seeded
// with valid and broken configs, anchors, env references and odd types).
// Parse must not panic, and must return either a config or a
// *bridge.ConfigError, never both and never neither.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`
name: migrate
log: {level: debug, format: json}
http:
  address: ":9999"
shutdown_timeout: 5s
routes:
  - name: orders
    from: {url: "mem://a?inflight=${INFLIGHT:-32}", topic: orders, group: "${GROUP}"}
    to: {url: mem://b}
    concurrency: 4
    retry: {max_attempts: 3, initial_interval: 10ms}
    poison: {topic: orders.poison, url: 'mem://p'}
    dedup: {ttl: 1h}
`))
	f.Add([]byte("routes:\n  - from: {url: 'amqp://u:${PASS}@h/', topic: t, group: g}\n    to: {url: 'redis://h/0', topic: t}\n"))
	f.Add([]byte("a: &x {b: *x}\nroutes: [*x]\n"))
	f.Add([]byte("routes: [{from: {url: '${UNSET}', topic: [1]}, to: 3, concurrency: 1e99}]\n---\nx: 1\n"))
	f.Add([]byte("shutdown_timeout: -1h\nhttp: {address: 'nope'}\nroutes: []\n"))
	f.Add([]byte("\t- :\n"))
	env := func(k string) (string, bool) {
		switch k {
		case "GROUP":
			return "g", true
		case "PASS":
			return "p@ss:w/rd", true
		}
		return "", false
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := bridge.Parse(data, "fuzz.yaml", env)
		if (c == nil) == (err == nil) {
			t.Fatalf("Parse returned config %v and error %v", c, err)
		}
		if err != nil {
			var ce *bridge.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %T is not a *bridge.ConfigError: %v", err, err)
			}
			_ = err.Error()
		}
	})
}
