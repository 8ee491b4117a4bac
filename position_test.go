package relay_test

import (
	"testing"

	"github.com/go-relay/relay"
)

func TestPositionRoundTrip(t *testing.T) {
	for _, p := range []relay.Position{
		relay.PartitionPosition(3, 1042),
		relay.PartitionPosition(0, 0),
		relay.OffsetPosition(77),
		relay.EntryPosition("1700000000000-12"),
		{},
	} {
		got, err := relay.ParsePosition(p.String())
		if err != nil || got != p {
			t.Errorf("ParsePosition(%q) = %v, %v; want %v", p.String(), got, err, p)
		}
		v := relay.FormatSource("kafka", "a@b.c", p)
		b, topic, pos, err := relay.ParseSource(v)
		if err != nil || b != "kafka" || topic != "a@b.c" || pos != p {
			t.Errorf("ParseSource(%q) = %q %q %v %v", v, b, topic, pos, err)
		}
	}
	if part, ok := relay.PartitionPosition(3, 9).Partition(); !ok || part != 3 {
		t.Errorf("Partition() = %d, %v", part, ok)
	}
	if _, ok := relay.OffsetPosition(9).Partition(); ok {
		t.Error("an offset position has a partition")
	}
	for _, bad := range []string{"x", "1:x", "-1:2", "orders"} {
		if _, err := relay.ParsePosition(bad); err == nil {
			t.Errorf("ParsePosition(%q) accepted", bad)
		}
	}
	if _, _, _, err := relay.ParseSource("nocolon"); err == nil {
		t.Error("ParseSource accepted a value without BACKEND:")
	}
}

func TestPositionOfUndeliveredMessage(t *testing.T) {
	if p := relay.NewMessage(nil).Position(); !p.IsZero() {
		t.Errorf("Position() = %v on a message that was not delivered", p)
	}
}
