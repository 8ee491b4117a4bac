package redislist

import (
	"fmt"
	"strings"

	"github.com/go-relay/relay"
)

// keys names the Redis keys of one topic under a prefix:
//
//	<prefix><topic>:groups                        set of the topic's groups
//	<prefix><topic>:<group>                       the group's list (head = next)
//	<prefix><topic>:<group>:consumers             set of the group's consumer IDs
//	<prefix><topic>:<group>:owner:<id>            a live consumer's owner key (TTL)
//	<prefix><topic>:<group>:processing:<id>       a consumer's messages being handled
//
// Topics and groups may not contain ':' and a group may not be called
// "groups", so no two names share a key.
type keys struct{ prefix, topic string }

func (k keys) groups() string                { return k.prefix + k.topic + ":groups" }
func (k keys) groupBase() string             { return k.prefix + k.topic + ":" }
func (k keys) list(group string) string      { return k.groupBase() + group }
func (k keys) base(group string) string      { return k.list(group) + ":" }
func (k keys) consumers(group string) string { return k.base(group) + "consumers" }
func (k keys) owner(group, id string) string {
	return k.base(group) + "owner:" + id
}
func (k keys) processing(group, id string) string {
	return k.base(group) + "processing:" + id
}

// validateTopic implements the topic rule of both sides.
func validateTopic(topic string) error {
	if strings.Contains(topic, ":") {
		return fmt.Errorf("%w: redislist: %q contains ':', which separates the parts of this adapter's key names; use another separator such as '.'", relay.ErrInvalidTopic, topic)
	}
	return nil
}
