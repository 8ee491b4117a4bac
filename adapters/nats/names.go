package nats

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/go-relay/relay"
)

// maxNameLen keeps derived stream and consumer names well inside what
// JetStream accepts (names become file names on the server).
const maxNameLen = 64

// StreamName is the name of the stream this adapter creates for topic:
// "relay_" followed by the topic with every character that a stream name
// may not hold ('.', '*', '>', path separators, whitespace and anything
// outside printable ASCII) replaced by '_'. When a character was replaced
// or the name would pass 64 characters, the name is cut and ends in "_"
// and 12 hex digits of the SHA-256 of the topic, so distinct topics never
// share a stream.
func StreamName(topic string) string { return "relay_" + safeName(topic, maxNameLen-len("relay_")) }

// ConsumerName is the durable consumer name of group on a stream the
// adapter created for one topic, derived as [StreamName] derives from
// the topic. On a stream given with stream= (which may hold several
// topics) the consumer is named from group and topic together:
// ConsumerName(group + "_" + topic).
func ConsumerName(group string) string { return safeName(group, maxNameLen) }

// nameChar reports whether c may stand in a stream or consumer name.
func nameChar(c byte) bool {
	return c > ' ' && c < 0x7f && c != '.' && c != '*' && c != '>' && c != '/' && c != '\\'
}

// validName reports whether s is a stream or consumer name as JetStream
// accepts it.
func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		if !nameChar(s[i]) {
			return false
		}
	}
	return s != ""
}

func safeName(s string, limit int) string {
	var b strings.Builder
	changed := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !nameChar(c) {
			b.WriteByte('_')
			changed = true
			continue
		}
		b.WriteByte(c)
	}
	out := b.String()
	if !changed && len(out) <= limit {
		return out
	}
	sum := sha256.Sum256([]byte(s))
	tail := "_" + hex.EncodeToString(sum[:6])
	if len(out) > limit-len(tail) {
		out = out[:limit-len(tail)]
	}
	return out + tail
}

// validateTopic checks that topic is a NATS subject a publisher may use:
// dot-separated non-empty tokens, no whitespace, no wildcards.
func validateTopic(topic string) error {
	if topic == "" {
		return fmt.Errorf("%w: empty", relay.ErrInvalidTopic)
	}
	for i := 0; i < len(topic); i++ {
		switch c := topic[i]; {
		case c <= ' ' || c == 0x7f:
			return fmt.Errorf("%w: nats: %q holds whitespace or a control character at byte %d; a NATS subject cannot", relay.ErrInvalidTopic, topic, i+1)
		case c == '*' || c == '>':
			return fmt.Errorf("%w: nats: %q holds the wildcard %q; publish to a concrete subject", relay.ErrInvalidTopic, topic, c)
		}
	}
	for _, tok := range strings.Split(topic, ".") {
		if tok == "" {
			return fmt.Errorf("%w: nats: %q has an empty token (a leading, trailing or doubled '.')", relay.ErrInvalidTopic, topic)
		}
	}
	if strings.HasPrefix(topic, "$") {
		return fmt.Errorf("%w: nats: %q starts with '$', reserved for NATS system subjects", relay.ErrInvalidTopic, topic)
	}
	return nil
}
