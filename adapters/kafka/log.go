package kafka

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kgoLogger passes franz-go's warnings and errors to slog. Its info and
// debug output (every join, every metadata refresh) is dropped.
type kgoLogger struct{ l *slog.Logger }

func (kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelWarn
	if level == kgo.LogLevelError {
		lv = slog.LevelError
	} else if level != kgo.LogLevelWarn {
		return
	}
	k.l.Log(context.Background(), lv, "relay/kafka: "+msg, keyvals...)
}
