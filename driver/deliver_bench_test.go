package driver

import (
	"context"
	"testing"

	"github.com/go-relay/relay"
)

// endlessRecv is a Receiver with an endless backlog whose calls only
// allocate the messages they return, as every adapter does: what a
// benchmark over it measures is the shared layer's own cost per message
// (delivery, settlement, flush) with that allocation.
type endlessRecv struct {
	nopSettler
	payload []byte
}

func (r *endlessRecv) Receive(_ context.Context, max int) ([]Received, error) {
	out := make([]Received, max)
	msgs := make([]relay.Message, max)
	for i := range out {
		msgs[i] = relay.Message{ID: "id", Payload: r.payload}
		out[i] = Received{Msg: &msgs[i], Attempt: 1, Handle: i}
	}
	return out, nil
}

// BenchmarkDeliverAck is the shared layer's cost per message on the
// channel path at its default options with an adaptive window: a
// receiver that answers at once (endlessRecv), a consumer that acks each
// message.
//
//	go test -run '^$' -bench DeliverAck -benchmem ./driver
func BenchmarkDeliverAck(b *testing.B) {
	sub := NewSubscriber(recvSub{&endlessRecv{payload: make([]byte, 100)}}, Options{InFlight: 64, MaxInFlight: DefaultMaxInFlight})
	defer sub.Close()
	ch, err := sub.Subscribe(context.Background(), "t")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		m := <-ch
		if err := m.Ack(); err != nil {
			b.Fatal(err)
		}
	}
}
