package gcppubsub

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/go-relay/relay"
)

// maxName is Pub/Sub's limit on topic and subscription IDs.
const maxName = 255

// validChars reports whether s holds only the characters Pub/Sub allows in
// topic and subscription IDs: letters, digits and - _ . ~ + %.
func validChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.~+%", c) >= 0) {
			return false
		}
	}
	return true
}

// validateTopic checks that topic is a Pub/Sub topic ID, which relay uses
// as it is: 3 to 255 characters of letters, digits and - _ . ~ + %,
// starting with a letter, not starting with "goog".
func validateTopic(topic string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: %q: %s (Pub/Sub topic IDs: 3-255 letters, digits and - _ . ~ + %%, starting with a letter, not with \"goog\")", relay.ErrInvalidTopic, topic, why)
	}
	switch {
	case len(topic) < 3 || len(topic) > maxName:
		return bad("length outside 3..255")
	case !('a' <= topic[0] && topic[0] <= 'z' || 'A' <= topic[0] && topic[0] <= 'Z'):
		return bad("does not start with a letter")
	case !validChars(topic):
		return bad("holds a character Pub/Sub does not allow")
	case strings.HasPrefix(strings.ToLower(topic), "goog"):
		return bad("starts with goog, which Pub/Sub reserves")
	}
	return nil
}

// SubscriptionID is the subscription of group on topic: "<topic>-<group>",
// or, when that passes Pub/Sub's 255 characters, its first characters, "-"
// and 16 hex digits of its SHA-256, so that the name depends on topic and
// group only and every process finds the same subscription.
func SubscriptionID(topic, group string) string { return shorten(topic + "-" + group) }

// shorten is name, or when it is longer than maxName its first characters,
// "-" and 16 hex digits of its SHA-256.
func shorten(name string) string {
	if len(name) <= maxName {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	tail := "-" + hex.EncodeToString(sum[:8])
	return name[:maxName-len(tail)] + tail
}

// topicPath and subPath are the resource names of a topic and a subscription.
func topicPath(project, topic string) string { return "projects/" + project + "/topics/" + topic }
func subPath(project, sub string) string     { return "projects/" + project + "/subscriptions/" + sub }
