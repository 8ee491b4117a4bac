package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-relay/relay/adapters/kafka"
)

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func runMigrate(e *env, args []string) int {
	if len(args) == 0 || args[0] != "offsets" {
		if len(args) > 0 && (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
			return runMigrateOffsets(e, []string{"--help"})
		}
		return usageErr(e, "migrate", "want a subcommand: relay migrate offsets --from kafka://... --to kafka://... --group G")
	}
	return runMigrateOffsets(e, args[1:])
}

func runMigrateOffsets(e *env, args []string) int {
	fs := newFlagSet(e, "migrate offsets", "", `
Translate the committed offsets of Kafka consumer groups from the source
cluster of a kafka -> kafka bridge route to its destination, so that the
groups' consumers resume on the destination where they stopped on the
source (docs/migration.md). The route must have run with
source_positions: true, so that every copy carries the relay-source header
naming its source partition and offset.

For each group and each destination partition, the committed offset is the
first record whose source record the group had not consumed (its source
offset at or past the group's committed offset on that source partition),
or the partition's end when it had consumed them all: the consumers skip
nothing; when a destination partition mixes several source partitions,
some records may be read twice (never missed).

Stop the group's consumers on the source first: a group with active
members on either cluster, or with committed offsets on the destination,
is refused unless --force. --dry-run prints the offsets and commits nothing.`)
	from := fs.String("from", "", "source cluster `URL` (kafka://host:9092, with its TLS/SASL options)")
	to := fs.String("to", "", "destination cluster `URL`")
	var groups, topicMap stringList
	fs.Var(&groups, "group", "consumer `group` to translate (repeat for several)")
	fs.Var(&topicMap, "topic-map", "`src:dst` topic names when the route renamed them (repeat; default: the same names)")
	force := fs.Bool("force", false, "translate groups with active members or destination offsets too")
	dryRun := fs.Bool("dry-run", false, "print the translated offsets, commit nothing")
	timeout := fs.Duration("timeout", 5*time.Minute, "bound for the whole translation")
	if code, ok := parse(fs, args, 0, 0); !ok {
		return code
	}
	if *from == "" || *to == "" || len(groups) == 0 {
		return usageErr(e, "migrate offsets", "--from, --to and at least one --group are required")
	}
	m := kafka.OffsetMigration{Groups: groups, Force: *force, DryRun: *dryRun}
	var err error
	if m.From, err = kafkaConfig(*from); err != nil {
		return usageErr(e, "migrate offsets", "--from: "+err.Error())
	}
	if m.To, err = kafkaConfig(*to); err != nil {
		return usageErr(e, "migrate offsets", "--to: "+err.Error())
	}
	for _, p := range topicMap {
		src, dst, ok := strings.Cut(p, ":")
		if !ok || src == "" || dst == "" {
			return usageErr(e, "migrate offsets", fmt.Sprintf("--topic-map %q: want SOURCE:DESTINATION", p))
		}
		if m.Topics == nil {
			m.Topics = map[string]string{}
		}
		m.Topics[src] = dst
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	out, err := m.Run(ctx)
	if err != nil {
		return failed(e, "migrate offsets", err)
	}
	verb := "committed"
	if *dryRun {
		verb = "would commit (dry run)"
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tSOURCE TOPIC\tTOPIC\tPARTITION\tOFFSET\tSCANNED")
	for _, t := range out {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\n", t.Group, t.FromTopic, t.Topic, t.Partition, t.Offset, t.Scanned)
	}
	_ = tw.Flush()
	fmt.Fprintf(e.stdout, "%s %d offset(s) for %d group(s)\n", verb, len(out), len(groups))
	return exitOK
}

// kafkaConfig parses a kafka:// URL into the client settings.
func kafkaConfig(raw string) (kafka.Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return kafka.Config{}, err
	}
	if !strings.EqualFold(u.Scheme, kafka.Scheme) {
		return kafka.Config{}, fmt.Errorf("%s: relay migrate offsets translates Kafka consumer groups only (kafka://); for other brokers see docs/migration.md", u.Scheme)
	}
	pc, err := kafka.ParsePublisherURL(u)
	if err != nil {
		return kafka.Config{}, err
	}
	return pc.Config, nil
}
