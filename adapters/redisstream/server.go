package redisstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

type version struct{ major, minor int }

func (v version) less(o version) bool {
	return v.major < o.major || (v.major == o.major && v.minor < o.minor)
}

func (v version) String() string { return fmt.Sprintf("%d.%d", v.major, v.minor) }

// parseVersion reads redis_version from the text of INFO server.
func parseVersion(info string) (version, string, bool) {
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		raw, ok := strings.CutPrefix(line, "redis_version:")
		if !ok {
			continue
		}
		parts := strings.SplitN(raw, ".", 3)
		if len(parts) < 2 {
			return version{}, raw, false
		}
		maj, err1 := strconv.Atoi(parts[0])
		min, err2 := strconv.Atoi(parts[1])
		if err1 != nil || err2 != nil {
			return version{}, raw, false
		}
		return version{maj, min}, raw, true
	}
	return version{}, "", false
}

// checkServer connects (bounded by ctx) and fails clearly when the server
// is older than need. A server that does not report a version is accepted.
func checkServer(ctx context.Context, c *redis.Client, need version, feature string) error {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	v, raw, ok := parseVersion(info)
	if ok && v.less(need) {
		return fmt.Errorf("server is Redis %s, too old: %s needs Redis %s or newer", raw, feature, need)
	}
	return nil
}

// transient reports errors worth retrying after a pause: the connection
// failed or the server is temporarily unable to serve (restarting,
// failing over).
func transient(err error) bool {
	if err == nil || errors.Is(err, redis.ErrClosed) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, redis.ErrPoolTimeout) {
		return true
	}
	msg := err.Error()
	for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "BUSY "} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return strings.Contains(msg, "connection refused") || strings.Contains(msg, "connection reset") || strings.Contains(msg, "broken pipe")
}

// noGroup reports the error Redis gives when the stream or the group does
// not exist (for instance after a restart without persistence).
func noGroup(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOGROUP")
}

// ensureGroup creates the stream (if missing) and the group at start;
// an existing group is left as it is.
func ensureGroup(ctx context.Context, c *redis.Client, key, group, start string) error {
	err := c.XGroupCreateMkStream(ctx, key, group, start).Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("relay/redis: creating group %q of stream %q: %w", group, key, err)
	}
	return nil
}
