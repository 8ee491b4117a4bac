package bridge_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-relay/relay/bridge"
	"github.com/go-relay/relay/internal/testenv"
)

// Two bridges on one route whose Kafka source topic has one partition:
// the status of the one the group assigned nothing says so (an empty
// Assigned list), the other's lists partition 0. A source that does not
// divide topics (mem://) leaves Assigned null.
func TestStatusAssignedPartitions(t *testing.T) {
	t.Parallel()
	k := kafkaURL(t)
	src := testenv.WithParams(k, "partitions", "1", "heartbeat_interval", "100ms")
	in, out := uniq("assigned-in"), uniq("assigned-out")
	route := bridge.Route{
		Name: "r",
		From: bridge.Source{URL: src, Topic: in, Group: "bridges"},
		To:   bridge.Destination{URL: k, Topic: out},
	}
	var brs []*bridge.Bridge
	for range 2 {
		br, err := bridge.New(bridge.Config{Routes: []bridge.Route{route}}, bridge.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		runBridge(t, br)
		brs = append(brs, br)
	}
	var got [2]string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		for i, br := range brs {
			got[i] = fmt.Sprint(br.Status().Routes[0].Assigned)
		}
		if (got[0] == "[0]" && got[1] == "[]") || (got[0] == "[]" && got[1] == "[0]") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("assigned %v after 30s, want [0] on one bridge and [] on the other", got)
		}
	}
	for _, br := range brs {
		if a := br.Status().Routes[0].Assigned; a == nil {
			t.Fatal("Assigned became null on a running Kafka route")
		}
	}

	mem, err := bridge.New(bridge.Config{Routes: []bridge.Route{{
		Name: "m", From: bridge.Source{URL: "mem://" + uniq("m"), Topic: "in", Group: "g"},
		To: bridge.Destination{URL: "mem://" + uniq("m"), Topic: "out"},
	}}}, bridge.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runBridge(t, mem)
	if a := mem.Status().Routes[0].Assigned; a != nil {
		t.Fatalf("a mem:// route reports assigned %v, want null", a)
	}
}
