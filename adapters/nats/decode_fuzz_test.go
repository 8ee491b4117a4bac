package nats

import (
	"testing"

	natsgo "github.com/nats-io/nats.go"
)

// FuzzDecode feeds arbitrary header blocks, as another publisher could
// send them, through nats.go's parser and decode: decode never panics and
// drops nothing: every header value is the ID, the Key, or a metadata
// value (relay's own encoded headers count once).
func FuzzDecode(f *testing.F) {
	f.Add([]byte("NATS/1.0\r\nA: 1\r\nA: 2\r\nA#2: x\r\n\r\n"), []byte("p"))
	f.Add([]byte("NATS/1.0\r\nNats-Msg-Id: i\r\nRelay-Key: k\r\nRelay-M-x: y\r\nRelay-Mx-eA: eQ==\r\n\r\n"), []byte{})
	f.Add([]byte("NATS/1.0\r\nRelay-Mx-!!: ???\r\nRelay-Id-B64: ***\r\n\r\n"), []byte(nil))
	f.Fuzz(func(t *testing.T, block, payload []byte) {
		h, err := natsgo.DecodeHeadersMsg(block)
		if err != nil {
			return
		}
		m := decode(h, payload, "S", 1)
		if m.ID == "" {
			t.Fatal("empty ID")
		}
		if m.Payload == nil {
			t.Fatal("nil payload")
		}
		values := 0
		for _, vs := range h {
			values += len(vs)
		}
		kept := len(m.Metadata)
		for _, name := range []string{HeaderMsgID, HeaderIDB64, HeaderKey, HeaderKeyB64} {
			if len(h[name]) > 0 {
				kept++ // its first value became the ID or the Key
			}
		}
		if kept != values {
			t.Fatalf("%d header values, %d kept (metadata %q)", values, kept, m.Metadata)
		}
	})
}
