// Package redislist is a relay adapter for Redis lists, the classic
// reliable-queue pattern, written outside the relay module on its public
// packages only (relay, relay/driver and its helpers urlopt and tlsconf;
// its tests use relay/driver/drivertest). It is the worked example of
// docs/adapters.md. Import it for its side effect:
//
//	import _ "github.com/go-relay/relay/examples/adapter/redislist"
//
//	pub, _ := relay.OpenPublisher(ctx, "redislist://127.0.0.1:6379/0")
//	sub, _ := relay.OpenSubscriber(ctx, "redislist://127.0.0.1:6379/0?group=billing")
//
// # URL
//
// redislist://[user:password@]host[:port][/db] with these parameters; one
// URL serves both sides, each ignoring the other's parameters (their
// values are still checked), and an unknown parameter is an error:
//
//	group=G       the subscriber's group of competing consumers (required to subscribe;
//	              no ':' and not "groups")
//	prefix=P      key prefix (default "relay:list:")
//	inflight=N    unsettled messages per subscription (default 64)
//	inflight_bytes=B  their bytes, e.g. 16MiB (default 64 MiB)
//	block=D       how long one BLMOVE waits for a message (default 5s; at most lease/2)
//	lease=D       TTL of a consumer's owner key (default 30s, at least 1s)
//	tls=true      connect with TLS; tls_ca, tls_cert, tls_key, tls_server_name and
//	              tls_insecure as on rediss:// (any of them implies tls=true)
//
// The parameters are read with relay/driver/urlopt and
// relay/driver/tlsconf, and the opener is relay/driver's Opener, so the
// adapter's URL handling is the parser above and nothing else.
//
// # Keys and data path
//
// For a topic T (no ':' allowed) under prefix P:
//
//	P T:groups                  set of T's groups
//	P T:G                       group G's list; the head is delivered next
//	P T:G:consumers             set of the IDs of G's consumers (one per subscription)
//	P T:G:owner:ID              a live consumer's owner key, with TTL lease
//	P T:G:processing:ID         the messages consumer ID received and has not settled
//
// Publish runs one Lua script per batch (at most 100 messages) that RPUSHes
// every message onto the list of every group of the topic, atomically. A
// topic with no group drops what is published to it: a group exists once
// it was provisioned (relay.Provisioner) or subscribed. Receive moves up
// to the free window's worth of elements from the group's list to the
// subscription's processing list with LMOVE in a script that also
// refreshes the owner key; when the list is empty it waits in BLMOVE on a
// connection of its own, which CLIENT UNBLOCK ends as soon as the
// subscription's ctx is done. Ack removes the element from the processing
// list (LREM); Nack, and the release of unsettled messages when a
// subscription ends, move it back to the head of the group's list with
// its attempt counted up, in one script. NackAfter is emulated by package
// driver (NativeDelay false): the message stays in the processing list
// for the delay, then is nacked; a subscription that ends meanwhile
// releases it at once. Closing a subscription hands back anything left in
// its processing list and deletes its keys.
//
// # Element encoding
//
// One list element is one message, a length-prefixed binary:
//
//	"RLQ1"                           magic and version (4 bytes)
//	attempt                          8 lowercase hex digits, 1 = first delivery
//	uvarint len, ID                  the message ID
//	uvarint len, Key                 the key
//	uvarint n, n × (len name, len value)   metadata, sorted by name
//	payload                          the rest (0 bytes for nil and empty alike)
//
// The attempt sits at a fixed offset so that the Lua scripts count it up
// without decoding, which makes Attempt broker-side (AttemptFromBroker):
// it survives consumer restarts. An element that does not decode (another
// producer's) is delivered with its raw bytes as payload and the problem
// in metadata "redislist-decode-error"; it never ends a subscription.
// Repeated metadata names (only a foreign producer can write them) follow
// relay's rule: the first keeps its name, the next ones become "<name>#2",
// "<name>#3", ...
//
// # Crash recovery
//
// Every subscription keeps its owner key alive (each Receive, and every
// lease/3 through driver.Extender while it holds messages). When a
// subscription of a group starts, the processing lists of the group's
// consumers whose owner key expired (processes that died holding
// messages) are moved back to the head of the group's list, with their
// attempts counted up. Known limits: reclaim runs only when a
// subscription starts, not periodically, so a dead consumer's messages
// wait for the next Subscribe of the group; and a consumer stalled for
// longer than lease may have its messages reclaimed while it still works
// on them, so both may handle them (delivery is at least once; its later
// Ack or Nack of a reclaimed element is a no-op).
//
// # Capabilities and limits
//
// Durable as far as the server persists (AOF or RDB); cross-process;
// ordered per topic for one consumer per group (a nacked or released
// message goes back to the head); no native delay or dead-lettering;
// messages up to 16 MiB (payload, ID, Key and metadata). The scripts build
// key names at run time, so the adapter needs a standalone Redis (or one
// with all of a prefix's keys on one node), not Redis Cluster. Needs
// Redis 6.2 or later (LMOVE, BLMOVE).
package redislist
