package mqtt

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// SessionID is the MQTT client ID of a subscription of topic by group's
// member instance: "relay/<group>/<instance>/<8 hex digits of the topic's
// SHA-256>/<n>", where n is 1 for the first subscription of the topic on
// the host and counts up for more at once (two processes, or two
// subscriptions of one process, on one host with one instance name). The
// broker keeps the session, its shared subscription and its messages
// under that ID; a subscriber that comes back with the same ID gets them.
func SessionID(group, instance, topic string, n int) string {
	h := sha256.Sum256([]byte(topic))
	return "relay/" + group + "/" + instance + "/" + hex.EncodeToString(h[:4]) + "/" + strconv.Itoa(n)
}

// maxSessions bounds the search for a free session number.
const maxSessions = 1000

// lockSession takes the host's claim on session n of topic: an exclusive
// flock on a file in the temporary directory (see lockFile), which holds
// across the processes of the host and which the kernel lets go when a
// process dies, since two clients with one ID take the session from each
// other in turn. ok is false when a subscription of the host holds it.
// release may be called more than once.
func (d *subDriver) lockSession(topic string, n int) (id string, release func(), ok bool, err error) {
	id = SessionID(d.sc.Group, d.sc.Instance, topic, n)
	h := sha256.Sum256([]byte(d.cfg.Broker + "\x00" + id))
	release, err = lockFile(filepath.Join(os.TempDir(), "relay-mqtt-"+hex.EncodeToString(h[:12])+".lock"))
	if err == errLocked {
		return id, nil, false, nil
	}
	if err != nil {
		return id, nil, false, fmt.Errorf("relay/mqtt: claiming session %s: %w", id, err)
	}
	if onSession != nil {
		onSession(id)
	}
	return id, sync.OnceFunc(release), true, nil
}

// onSession, when set (by tests), is told every session ID used.
var onSession func(id string)
