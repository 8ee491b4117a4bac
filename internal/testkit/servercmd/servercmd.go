// Package servercmd is what the commands that run a test broker as a
// process of their own (internal/cmd/kfakeserver, internal/cmd/pstestserver)
// share: their main, which maps a command's outcome to its exit code, and
// for their tests Start, which runs a command in the test's process until
// it reports its address.
package servercmd

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Run is a command: it parses args (usage text goes to errOut), starts the
// server, prints "<name>: listening on <addresses>" to out, and stops the
// server once wait returns. A bad command line is a UsageError.
type Run func(args []string, out, errOut io.Writer, wait func()) error

// UsageError is a bad command line.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Main runs run with the process's arguments until SIGINT or SIGTERM and
// exits: 2 after a UsageError, 0 after -h, 1 after another error.
func Main(name string, run Run) {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	err := run(os.Args[1:], os.Stdout, os.Stderr, func() { <-stop })
	var usage UsageError
	switch {
	case errors.As(err, &usage):
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(2)
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case err != nil:
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// Parse parses args with fs, whose output goes to errOut: a bad command
// line, or arguments after the flags, is a UsageError; -h is flag.ErrHelp.
func Parse(fs *flag.FlagSet, args []string, errOut io.Writer) error {
	fs.SetOutput(errOut)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return UsageError{err}
	}
	if fs.NArg() > 0 {
		return UsageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	return nil
}

// Start runs run with args in a goroutine until it prints its first line,
// which must be "<name>: listening on <addresses>", and returns the
// addresses and the func that stops it and returns run's error (also
// called when t ends).
func Start(t testing.TB, name string, run Run, args ...string) (addrs string, stop func() error) {
	t.Helper()
	var out bytes.Buffer
	listening := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	w := &firstWrite{buf: &out, first: listening}
	go func() { done <- run(args, w, io.Discard, func() { <-release }) }()
	stop = sync.OnceValue(func() error { close(release); return <-done })
	t.Cleanup(func() { _ = stop() })
	select {
	case <-listening:
	case err := <-done:
		t.Fatalf("%s ended before listening: %v", name, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s not listening within 10s", name)
	}
	line := strings.TrimSpace(out.String())
	addrs, ok := strings.CutPrefix(line, name+": listening on ")
	if !ok || addrs == "" {
		t.Fatalf("first line %q does not name the address", line)
	}
	return addrs, stop
}

// firstWrite closes first after the first write.
type firstWrite struct {
	buf   *bytes.Buffer
	first chan struct{}
}

func (w *firstWrite) Write(p []byte) (int, error) {
	n, err := w.buf.Write(p)
	if w.first != nil {
		close(w.first)
		w.first = nil
	}
	return n, err
}
