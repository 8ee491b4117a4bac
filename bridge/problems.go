package bridge

import (
	"fmt"
	"sort"
	"strings"
)

// Pos is a position in a configuration file. Line and Column are 1-based;
// zero means unknown (a Config built in Go rather than parsed).
type Pos struct {
	Line, Column int
}

// Problem is one thing wrong with a configuration.
type Problem struct {
	File string // file name as given to Parse ("" when unknown)
	Pos  Pos
	// Path names the field, e.g. "routes[0].from.url" (or "" for the file
	// as a whole).
	Path string
	Msg  string

	err error // the error behind Msg, when there is one (see ConfigError.Unwrap)
}

// String formats the problem as "FILE:LINE:COL: PATH: MSG", leaving out
// the parts that are unknown.
func (p Problem) String() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File)
		b.WriteByte(':')
	}
	if p.Pos.Line > 0 {
		fmt.Fprintf(&b, "%d:", p.Pos.Line)
		if p.Pos.Column > 0 {
			fmt.Fprintf(&b, "%d:", p.Pos.Column)
		}
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// ConfigError lists every problem found in a configuration, in file order.
// Messages never contain passwords: URLs in them are redacted.
type ConfigError struct {
	Problems []Problem
}

func (e *ConfigError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	if len(lines) == 1 {
		return "invalid bridge config: " + lines[0]
	}
	return fmt.Sprintf("invalid bridge config (%d problems):\n  %s", len(lines), strings.Join(lines, "\n  "))
}

// Unwrap exposes the errors behind problems that have one (an endpoint
// that refused its URL when Run opened it), so that errors.Is(err,
// relay.ErrBadURL) holds for them.
func (e *ConfigError) Unwrap() []error {
	var errs []error
	for _, p := range e.Problems {
		if p.err != nil {
			errs = append(errs, p.err)
		}
	}
	return errs
}

// problems collects Problems while a config is decoded and validated.
type problems struct {
	file string
	pos  map[string]Pos // field path → position of its value
	list []Problem
	bad  map[string]bool // paths that already have a problem
}

func newProblems(file string, pos map[string]Pos) *problems {
	if pos == nil {
		pos = map[string]Pos{}
	}
	return &problems{file: file, pos: pos, bad: map[string]bool{}}
}

// at records a problem at an explicit position.
func (p *problems) at(pos Pos, path, format string, args ...any) {
	p.bad[path] = true
	p.list = append(p.list, Problem{File: p.file, Pos: pos, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// add records a problem for path, at the position of path or of its
// nearest ancestor that has one. It is ignored when decoding already
// reported a problem for path (so a value that did not parse is not also
// reported as missing).
func (p *problems) add(path, format string, args ...any) {
	if p.bad[path] {
		return
	}
	p.at(p.lookup(path), path, format, args...)
}

func (p *problems) lookup(path string) Pos {
	for q := path; ; {
		if pos, ok := p.pos[q]; ok {
			return pos
		}
		i := strings.LastIndexAny(q, ".[")
		if i <= 0 {
			return p.pos[""]
		}
		q = q[:i]
	}
}

func (p *problems) err() error {
	if len(p.list) == 0 {
		return nil
	}
	list := append([]Problem(nil), p.list...)
	sort.SliceStable(list, func(i, j int) bool {
		a, b := list[i].Pos, list[j].Pos
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
	return &ConfigError{Problems: list}
}
