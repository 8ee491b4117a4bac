// Package bridge forwards messages between any two relay URLs: the engine
// of `relay bridge`, the daemon a team runs while it migrates traffic from
// one broker to another.
//
// A bridge is a set of routes, each "from URL+topic (in a group) → to
// URL+topic". For every message a route consumes, it publishes a copy with
// the same ID, Key, Metadata and Payload to the destination, and acks the
// source only after the destination confirmed the publish: delivery is
// at-least-once and the bridge keeps no state on disk. A crash between the
// publish and the ack leads to a duplicate at the destination, never to a
// loss; enable Route.Dedup with a Redis store to suppress those.
//
// Loops are cut with a hop marker in metadata (HopsKey), so two bridges
// forwarding A→B and B→A at the same time do not ping-pong.
//
// The configuration is YAML (Parse, Load) or a Config built in Go; both are
// checked by Validate, which reports every problem at once with its file
// position and field path. See docs/bridge.md for the reference.
package bridge
