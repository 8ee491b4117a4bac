package bridge

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"slices"
	"strings"

	"github.com/go-relay/relay"
)

// HopsKey is the metadata key in which routes record where a message has
// been, to break forwarding loops.
//
// Its value is a comma-separated list of hop IDs: 16 hex digits that name a
// topic on a broker (see Source.ID). A route forwarding from S to D does
// not forward (it acks and counts the message as looped) a message whose
// list already holds D (the message came from there: forwarding it back
// would echo it) or S (it has left S before, so it came round in a
// circle). Otherwise it publishes the message with S appended.
//
// So with one bridge forwarding A→B and another B→A during a migration, a
// message published to A reaches B once and never comes back to A, and
// every cycle of routes, however long, is cut after at most one round even
// when the bridges name the same broker differently. Applications that
// republish a received message to another topic should drop this key.
const HopsKey = "relay-hops"

// hopID names a topic on a broker. An explicit id wins; otherwise it is
// derived from the URL without credentials and without the options that do
// not change where messages are kept.
func hopID(rawURL, topic, explicit string) string {
	name := explicit
	if name == "" {
		name = "url:" + placeOf(rawURL) + "#" + topic
	} else {
		name = "id:" + name
	}
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:8])
}

func sourceHopID(s Source) string    { return hopID(s.URL, s.Topic, s.ID) }
func destHopID(d Destination) string { return hopID(d.URL, d.Topic, d.ID) }

// placeOf reduces a broker URL to what identifies the broker: scheme, host
// and path (vhost, database), plus region and endpoint for services that
// have no host in the URL (sqs://, sns://).
func placeOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	place := strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host) + strings.TrimSuffix(u.EscapedPath(), "/")
	if u.Host == "" {
		q := u.Query()
		for _, k := range []string{"region", "endpoint"} {
			if v := q.Get(k); v != "" {
				place += ";" + k + "=" + v
			}
		}
	}
	return place
}

// hops returns the hop IDs recorded in m.
func hops(md relay.Metadata) []string {
	v := md[HopsKey]
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// looped reports whether a message with metadata md must not be forwarded
// from src to dst.
func looped(md relay.Metadata, src, dst string) bool {
	h := hops(md)
	return slices.Contains(h, dst) || slices.Contains(h, src)
}

// addHop records src in md (which must be the forwarded copy's own map).
func addHop(md relay.Metadata, src string) {
	if v := md[HopsKey]; v != "" {
		md[HopsKey] = v + "," + src
	} else {
		md[HopsKey] = src
	}
}

// copyOf returns the copy of m that the route publishes (see copyInto).
func (r *route) copyOf(m *relay.Message) *relay.Message {
	c := new(relay.Message)
	r.copyInto(c, m)
	return c
}

// copyInto makes c, a new message, the copy of m that the route publishes:
// it shares the payload (nothing writes to it) and has m's metadata with
// the hop marker added. A message without metadata (what most producers
// send) gets r.hopOnly, a map shared by all such copies, instead of a map
// of its own: making and filling a map per message took a tenth of a
// kafka -> kafka forward's CPU. Sharing is sound because nothing on the
// way to the destination writes a copy's metadata (drivers only read it;
// the publisher's delay stamp clones it first) except the destination
// tracer's injection of its span context, so a route with a tracer gives
// every copy its own map.
//
// With SourcePositions, a copy of a message that has a position gets
// its own map with relay.SourceKey too.
func (r *route) copyInto(c, m *relay.Message) {
	c.ID, c.Key, c.Payload = m.ID, m.Key, m.Payload
	var pos relay.Position
	if r.srcPrefix != "" {
		pos = m.Position()
	}
	if len(m.Metadata) == 0 && r.tel.dstTracer == nil && pos.IsZero() {
		c.Metadata = r.hopOnly
		return
	}
	md := make(relay.Metadata, len(m.Metadata)+2)
	for k, v := range m.Metadata {
		md[k] = v
	}
	addHop(md, r.srcHop)
	if !pos.IsZero() {
		md[relay.SourceKey] = r.srcPrefix + pos.String()
	}
	c.Metadata = md
}
