package bridge

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/internal/suggest"
)

// Load reads and parses the YAML file at path; see Parse. Environment
// variables come from the process environment.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data, path, os.LookupEnv)
}

// Parse decodes a YAML bridge configuration and validates it. file names
// the source in problems. lookupEnv resolves ${NAME} and ${NAME:-default}
// in every scalar value (nil: os.LookupEnv); expansion happens after YAML
// parsing, so a value cannot inject YAML structure.
//
// The schema is strict: an unknown or duplicate field, a value of the
// wrong type and every problem Validate finds are all reported at once in
// a *ConfigError, each with its line, column and field path. The returned
// Config is nil whenever the error is not.
func Parse(data []byte, file string, lookupEnv func(string) (string, bool)) (*Config, error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	d := &decoder{p: newProblems(file, nil), env: lookupEnv}
	d.p.pos[""] = Pos{Line: 1, Column: 1}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	err := dec.Decode(&doc)
	switch {
	case errors.Is(err, io.EOF):
		d.p.at(Pos{Line: 1}, "", "the file is empty: want a mapping with at least routes")
		return nil, d.p.err()
	case err != nil:
		d.syntaxError(err)
		return nil, d.p.err()
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		d.p.at(Pos{Line: extra.Line, Column: extra.Column}, "", "more than one YAML document: put everything in one")
	} else if !errors.Is(err, io.EOF) {
		d.syntaxError(err)
	}
	var c Config
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	d.config(root, &c)
	c.pos, c.file = d.p.pos, file
	c.validate(d.p)
	if err := d.p.err(); err != nil {
		return nil, err
	}
	return &c, nil
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func (d *decoder) syntaxError(err error) {
	msg := err.Error()
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		d.p.at(Pos{Line: line}, "", "YAML syntax: %s", m[2])
		return
	}
	d.p.at(Pos{}, "", "YAML syntax: %s", strings.TrimPrefix(msg, "yaml: "))
}

// decoder walks the YAML node tree, so that every value keeps its
// position and every problem is reported, not just the first.
type decoder struct {
	p   *problems
	env func(string) (string, bool)
}

type field struct {
	name string
	fn   func(n *yaml.Node, path string)
}

func posOf(n *yaml.Node) Pos { return Pos{Line: n.Line, Column: n.Column} }

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// mapping decodes the fields of a mapping node; unknown and duplicate keys
// are problems. It reports whether n was a mapping (or null).
func (d *decoder) mapping(n *yaml.Node, path string, fields ...field) bool {
	n = deref(n)
	if isNull(n) {
		return true
	}
	if n.Kind != yaml.MappingNode {
		d.p.at(posOf(n), path, "want a mapping of %s, got %s", fieldNames(fields), kindName(n))
		return false
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		kp := join(path, k.Value)
		if line, dup := seen[k.Value]; dup {
			d.p.at(posOf(k), kp, "duplicate field (first on line %d)", line)
			continue
		}
		seen[k.Value] = k.Line
		var fn func(*yaml.Node, string)
		for _, f := range fields {
			if f.name == k.Value {
				fn = f.fn
			}
		}
		if fn == nil {
			msg := "unknown field"
			if s := suggest.Closest(k.Value, names(fields)); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			d.p.at(posOf(k), kp, "%s; known fields here: %s", msg, fieldNames(fields))
			continue
		}
		// A scalar is reported where its value is; a missing field of a
		// nested mapping or list where the key of that mapping is.
		if dv := deref(v); dv.Kind == yaml.ScalarNode || dv.Style&yaml.FlowStyle != 0 {
			d.p.pos[kp] = posOf(v)
		} else {
			d.p.pos[kp] = posOf(k)
		}
		fn(v, kp)
	}
	return true
}

func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}

// fieldNames lists the names of fields, sorted, for messages.
func fieldNames(fields []field) string {
	names := names(fields)
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func names(fields []field) []string {
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.name
	}
	return names
}

// scalar returns the env-expanded value of a scalar node; ok is false when
// a problem was reported.
func (d *decoder) scalar(n *yaml.Node, path, want string) (string, bool) {
	n = deref(n)
	if n.Kind != yaml.ScalarNode {
		d.p.at(posOf(n), path, "want %s, got %s", want, kindName(n))
		return "", false
	}
	if isNull(n) {
		return "", true
	}
	v, err := expandEnv(n.Value, d.env)
	if err != nil {
		d.p.at(posOf(n), path, "%v", err)
		return "", false
	}
	return v, true
}

func (d *decoder) str(dst *string) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		if v, ok := d.scalar(n, path, "a string"); ok {
			*dst = v
		}
	}
}

func (d *decoder) int(dst *int) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		v, ok := d.scalar(n, path, "a whole number")
		if !ok || v == "" {
			return
		}
		i, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			d.p.at(posOf(n), path, "%q: want a whole number", v)
			return
		}
		*dst = i
	}
}

// bytes reads a byte count: a whole number or a size with a binary unit
// (64MiB), as inflight_bytes= takes it.
func (d *decoder) bytes(dst *int64) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		v, ok := d.scalar(n, path, "a size")
		if !ok || v == "" {
			return
		}
		b, err := driver.ParseBytes(strings.TrimSpace(v))
		if err != nil {
			d.p.at(posOf(n), path, "%q: want a size such as 1048576 or 64MiB", v)
			return
		}
		*dst = b
	}
}

func (d *decoder) duration(dst *time.Duration) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		v, ok := d.scalar(n, path, "a duration")
		if !ok || v == "" {
			return
		}
		t, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			if v == "0" {
				return
			}
			d.p.at(posOf(n), path, "%q: want a duration such as 500ms, 30s or 5m", v)
			return
		}
		*dst = t
	}
}

func (d *decoder) summaryInterval(dst *time.Duration) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		v, ok := d.scalar(n, path, "a duration or off")
		if !ok || v == "" {
			return
		}
		t, err := ParseSummaryInterval(v)
		if err != nil {
			d.p.at(posOf(n), path, "%v", err)
			return
		}
		*dst = t
	}
}

func (d *decoder) guarantee(dst *relay.Guarantee) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		v, ok := d.scalar(n, path, "a guarantee")
		if !ok || v == "" {
			return
		}
		g, err := relay.ParseGuarantee(strings.TrimSpace(v))
		if err != nil {
			d.p.at(posOf(n), path, "%q: want at-most-once, at-least-once or exactly-once", v)
			return
		}
		*dst = g
	}
}

func (d *decoder) bool(dst *bool) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		v, ok := d.scalar(n, path, "true or false")
		if !ok || v == "" {
			return
		}
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			d.p.at(posOf(n), path, "%q: want true or false", v)
			return
		}
		*dst = b
	}
}

func (d *decoder) config(n *yaml.Node, c *Config) {
	if isNull(deref(n)) {
		d.p.at(posOf(n), "", "the file is empty: want a mapping with at least routes")
		return
	}
	d.mapping(n, "",
		field{"name", d.str(&c.Name)},
		field{"log", func(n *yaml.Node, path string) {
			d.mapping(n, path,
				field{"level", d.str(&c.Log.Level)},
				field{"format", d.str(&c.Log.Format)},
				field{"summary_interval", d.summaryInterval(&c.Log.SummaryInterval)})
		}},
		field{"http", func(n *yaml.Node, path string) {
			d.mapping(n, path,
				field{"address", d.str(&c.HTTP.Address)},
				field{"disabled", d.bool(&c.HTTP.Disabled)},
				field{"profiling", d.bool(&c.HTTP.Profiling)})
		}},
		field{"shutdown_timeout", d.duration(&c.ShutdownTimeout)},
		field{"routes", func(n *yaml.Node, path string) { d.routes(n, path, c) }},
	)
}

func (d *decoder) routes(n *yaml.Node, path string, c *Config) {
	n = deref(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.p.at(posOf(n), path, "want a list of routes, got %s", kindName(n))
		return
	}
	c.Routes = make([]Route, len(n.Content))
	for i, rn := range n.Content {
		rp := path + "[" + strconv.Itoa(i) + "]"
		d.p.pos[rp] = posOf(rn)
		d.route(rn, rp, &c.Routes[i])
	}
}

func (d *decoder) route(n *yaml.Node, path string, r *Route) {
	d.mapping(n, path,
		field{"name", d.str(&r.Name)},
		field{"from", func(n *yaml.Node, path string) {
			d.mapping(n, path,
				field{"url", d.str(&r.From.URL)},
				field{"topic", d.str(&r.From.Topic)},
				field{"group", d.str(&r.From.Group)},
				field{"id", d.str(&r.From.ID)},
				field{"inflight", d.int(&r.From.InFlight)},
				field{"inflight_bytes", d.bytes(&r.From.InFlightBytes)})
		}},
		field{"to", func(n *yaml.Node, path string) {
			d.mapping(n, path,
				field{"url", d.str(&r.To.URL)},
				field{"topic", d.str(&r.To.Topic)},
				field{"id", d.str(&r.To.ID)})
		}},
		field{"concurrency", d.int(&r.Concurrency)},
		field{"batch", d.int(&r.Batch)},
		field{"publish_timeout", d.duration(&r.PublishTimeout)},
		field{"guarantee", d.guarantee(&r.Guarantee)},
		field{"caught_up_after", d.duration(&r.CaughtUpAfter)},
		field{"stop_when", d.str(&r.StopWhen)},
		field{"source_positions", d.bool(&r.SourcePositions)},
		field{"retry", func(n *yaml.Node, path string) {
			r.Retry = &Retry{}
			d.mapping(n, path,
				field{"max_attempts", d.int(&r.Retry.MaxAttempts)},
				field{"initial_interval", d.duration(&r.Retry.InitialInterval)},
				field{"max_interval", d.duration(&r.Retry.MaxInterval)},
				field{"max_elapsed", d.duration(&r.Retry.MaxElapsed)})
		}},
		field{"poison", func(n *yaml.Node, path string) {
			r.Poison = &Poison{}
			d.mapping(n, path,
				field{"url", d.str(&r.Poison.URL)},
				field{"topic", d.str(&r.Poison.Topic)},
				field{"after_deliveries", d.int(&r.Poison.AfterDeliveries)})
		}},
		field{"dedup", func(n *yaml.Node, path string) {
			r.Dedup = &Dedup{}
			d.mapping(n, path,
				field{"store", d.str(&r.Dedup.Store)},
				field{"ttl", d.duration(&r.Dedup.TTL)})
		}},
	)
}
