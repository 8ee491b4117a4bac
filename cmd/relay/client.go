package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/go-relay/relay"
)

// headers is a repeatable --header k=v flag.
type headers relay.Metadata

func (h headers) String() string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k+"="+h[k])
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func (h headers) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	h[k] = v
	return nil
}

// clientLogger sends adapter logs (reconnects and the like) to stderr at
// warn level, or debug with -v.
func clientLogger(e *env, verbose bool) {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelDebug
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level})))
}

// signalContext is cancelled by SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

// subscriberURL adds group=g to raw unless g is empty. It is an error when
// raw already names another group.
func subscriberURL(raw, g string) (string, error) {
	if g == "" {
		return raw, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("bad URL %s", relay.Redact(raw))
	}
	q := u.Query()
	if old := q.Get("group"); old != "" && old != g {
		return "", fmt.Errorf("--group %q differs from group=%q in the URL", g, old)
	}
	q.Set("group", g)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// stdinIsTerminal reports whether r is an interactive terminal, where
// reading a payload would wait for typing.
func stdinIsTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func flagWasSet(fs *flagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}
