package redisstream

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// go-redis writes its own messages (a failed dial, a pool event) straight
// to stderr with the standard log package, beside whatever the program
// logs. Importing this package sends them to slog.Default() instead, at
// debug level, with backend=redis: the adapter reports what matters (a
// failed connect, a reconnect) itself. The setting is go-redis's and
// process-wide; a program that wants another calls redis.SetLogger after
// the import.
func init() { redis.SetLogger(slogPrintf{}) }

// slogPrintf adapts slog.Default() to go-redis's logger interface. It
// looks the default logger up on each call, so that slog.SetDefault made
// after the import applies.
type slogPrintf struct{}

func (slogPrintf) Printf(ctx context.Context, format string, v ...any) {
	l := slog.Default()
	if ctx == nil {
		ctx = context.Background()
	}
	if !l.Enabled(ctx, slog.LevelDebug) {
		return
	}
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	l.DebugContext(ctx, "go-redis: "+msg, "backend", "redis")
}
