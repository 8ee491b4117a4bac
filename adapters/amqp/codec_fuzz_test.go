package amqp

import (
	"strconv"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// fuzzTable builds an AMQP header table of mixed value types from a text
// spec: entries split at '\n', each "name=T:value" where T picks the Go
// type the client library would hand us (s string, b bytes, i int64,
// I int32, h int16, f float64, t bool, T timestamp, d decimal, n nil,
// A an x-death-like array of tables, F a nested table).
func fuzzTable(spec string) amqp091.Table {
	if spec == "" {
		return nil
	}
	tab := amqp091.Table{}
	for _, line := range strings.Split(spec, "\n") {
		name, rest, _ := strings.Cut(line, "=")
		typ, val, _ := strings.Cut(rest, ":")
		n, _ := strconv.ParseInt(val, 10, 64)
		switch typ {
		case "b":
			tab[name] = []byte(val)
		case "i":
			tab[name] = n
		case "I":
			tab[name] = int32(n)
		case "h":
			tab[name] = int16(n)
		case "f":
			f, _ := strconv.ParseFloat(val, 64)
			tab[name] = f
		case "t":
			tab[name] = val != ""
		case "T":
			tab[name] = time.Unix(n, 0)
		case "d":
			tab[name] = amqp091.Decimal{Scale: uint8(n), Value: int32(n)}
		case "n":
			tab[name] = nil
		case "A":
			var arr []any
			for _, q := range strings.Split(val, ",") {
				arr = append(arr, amqp091.Table{"queue": q, "count": n, "reason": "expired"}, q)
			}
			tab[name] = arr
		case "F":
			tab[name] = amqp091.Table{"inner": val, "n": n}
		default:
			tab[name] = val
		}
	}
	return tab
}

// FuzzDecode feeds decode deliveries as a non-relay producer (or a
// damaged relay one) could send them: arbitrary properties, body and
// headers of every AMQP type, including relay's reserved headers and
// x-death traces. decode must not panic and must deliver a message with
// an ID and the body unchanged.
func FuzzDecode(f *testing.F) {
	f.Add("id-1", "rk", []byte("body"), "x-relay-key=s:k\nx-relay-attempt=s:3\nplain=i:5", "text/plain", int64(0), uint8(0))
	f.Add("", "", []byte(nil), "x-death=A:q1,relay.delay.q\nx-first-death-queue=s:relay.delay.q\nx-delivery-count=I:4", "", int64(1700000000), uint8(9))
	f.Add("", "k", []byte{0, 0xff}, "x-relay-attempt=i:-1\nx-delivery-count=s:nope\nd=d:3\nt=t:1\nnest=F:x\nnil=n:\nbin=b:\xff", "\xff", int64(-1), uint8(255))
	f.Fuzz(func(t *testing.T, id, routingKey string, body []byte, headers, contentType string, ts int64, priority uint8) {
		d := &amqp091.Delivery{
			MessageId:   id,
			RoutingKey:  routingKey,
			Body:        body,
			Headers:     fuzzTable(headers),
			ContentType: contentType,
			Priority:    priority,
		}
		if ts != 0 {
			d.Timestamp = time.Unix(ts, 0)
		}
		out := decode(d, func(q string) bool { return strings.HasPrefix(q, "relay.delay.") })
		if out.msg == nil {
			t.Fatal("decode returned no message")
		}
		if out.msg.ID == "" {
			t.Fatalf("no ID for delivery %+v", d)
		}
		if string(out.msg.Payload) != string(body) {
			t.Fatalf("payload %q, want %q", out.msg.Payload, body)
		}
		if out.base < 1 {
			t.Fatalf("attempt base %d < 1", out.base)
		}
	})
}
