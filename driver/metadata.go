package driver

import (
	"strconv"

	"github.com/go-relay/relay"
)

// AddRepeat keeps value of a name that a foreign producer repeated (Kafka
// headers, Redis stream fields, NATS headers allow repeats; relay.Metadata
// does not): it stores value under "<name>#2", or the next free number
// when that name is taken, and returns md (allocated if nil). The rule every
// adapter follows is that the first occurrence keeps its name and each
// later one goes through AddRepeat in order, so nothing a producer wrote
// is lost. Decode the first occurrences of a message before its repeats,
// so that a repeat never takes a name a later first occurrence needs.
func AddRepeat(md relay.Metadata, name, value string) relay.Metadata {
	if md == nil {
		md = make(relay.Metadata, 1)
	}
	for n := 2; ; n++ {
		k := name + "#" + strconv.Itoa(n)
		if _, taken := md[k]; !taken {
			md[k] = value
			return md
		}
	}
}
