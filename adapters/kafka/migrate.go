package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-relay/relay"
)

// OffsetMigration translates the committed offsets of consumer groups from
// one cluster to another that a relay bridge forwarded to with source
// positions on (every copy carries relay.SourceKey, "kafka:TOPIC@P:O"),
// so that the groups' consumers resume on the destination where they
// stopped on the source: relay migrate offsets (docs/migration.md).
type OffsetMigration struct {
	// From and To are the source and destination clusters.
	From, To Config
	// Groups are the consumer groups to translate. At least one.
	Groups []string
	// Topics maps a source topic to its destination topic. Empty: every
	// topic a group committed on the source, under the same name; a
	// topic the map does not name is then skipped.
	Topics map[string]string
	// Force translates a group even when it has members on either
	// cluster or committed offsets on the destination (which it
	// overwrites).
	Force bool
	// DryRun computes the offsets and commits nothing.
	DryRun bool
}

// TranslatedOffset is the destination offset of one group on one
// destination partition.
type TranslatedOffset struct {
	Group     string
	FromTopic string
	Topic     string
	Partition int32
	// Offset is the first record of the partition whose source record
	// the group had not consumed (its source offset at or past the
	// group's committed offset of its source partition), or the end of
	// the partition when the group had consumed every one.
	Offset int64
	// Scanned counts the records read to find it.
	Scanned int64
}

// ErrGroupActive is returned (wrapped) by OffsetMigration.Run for a group
// that has members, or committed offsets on the destination, without
// Force.
var ErrGroupActive = errors.New("relay/kafka: group is in use")

// ErrNoSourcePositions is returned (wrapped) by OffsetMigration.Run when no
// record of a destination topic carries the source position of its copy
// (relay.SourceKey, written by a bridge route with source_positions), so
// that nothing can be translated; nothing is committed then.
var ErrNoSourcePositions = errors.New("relay/kafka: the copies carry no source positions")

// Run translates the offsets of every group and, unless DryRun, commits
// them on the destination. It checks every group before it commits any:
// without Force, a group with members on either cluster or with committed
// offsets on the destination fails the whole run with ErrGroupActive.
//
// For each destination partition it reads records from the start until
// it finds one whose relay.SourceKey names a source record the group had
// not consumed (source offset at or past the group's commit on that
// source partition; a source partition without a commit counts as not
// consumed). That record's offset is the group's destination offset, so
// no record the group had not consumed is skipped. When a destination
// partition holds records of several source partitions, records the group
// consumed may follow that offset and are read again: duplicates, never
// gaps. Records without a relay.SourceKey header of the mapped topic are
// passed over (taken as consumed), and so are malformed ones. Blocking; ctx bounds it.
func (o OffsetMigration) Run(ctx context.Context) ([]TranslatedOffset, error) {
	if len(o.Groups) == 0 {
		return nil, errors.New("relay/kafka: no group to translate")
	}
	from, to := o.From, o.To
	from.defaults()
	to.defaults()
	srcOpts, err := from.clientOpts()
	if err != nil {
		return nil, err
	}
	dstOpts, err := to.clientOpts()
	if err != nil {
		return nil, err
	}
	src, err := kgo.NewClient(srcOpts...)
	if err != nil {
		return nil, fmt.Errorf("relay/kafka: %w", err)
	}
	defer src.Close()
	dst, err := kgo.NewClient(dstOpts...)
	if err != nil {
		return nil, fmt.Errorf("relay/kafka: %w", err)
	}
	defer dst.Close()
	sadm, dadm := kadm.NewClient(src), kadm.NewClient(dst)

	if err := o.checkGroups(ctx, sadm, dadm); err != nil {
		return nil, err
	}
	var out []TranslatedOffset
	commits := map[string]kadm.Offsets{}
	for _, g := range o.Groups {
		fetched, err := sadm.FetchOffsets(ctx, g)
		if err != nil {
			return nil, fmt.Errorf("relay/kafka: reading the offsets of group %q on the source: %w", g, err)
		}
		if err := fetched.Error(); err != nil {
			return nil, fmt.Errorf("relay/kafka: reading the offsets of group %q on the source: %w", g, err)
		}
		committed := map[string]map[int32]int64{} // source topic → partition → offset
		fetched.Each(func(r kadm.OffsetResponse) {
			if r.At < 0 {
				return
			}
			if committed[r.Topic] == nil {
				committed[r.Topic] = map[int32]int64{}
			}
			committed[r.Topic][r.Partition] = r.At
		})
		if len(committed) == 0 {
			return nil, fmt.Errorf("relay/kafka: group %q has no committed offsets on the source", g)
		}
		srcTopics := make([]string, 0, len(committed))
		for t := range committed {
			srcTopics = append(srcTopics, t)
		}
		sort.Strings(srcTopics)
		for _, st := range srcTopics {
			dt := st
			if len(o.Topics) > 0 {
				var ok bool
				if dt, ok = o.Topics[st]; !ok {
					continue
				}
			}
			tos, err := translateTopic(ctx, dadm, dstOpts, g, st, dt, committed[st])
			if err != nil {
				return nil, err
			}
			offs := commits[g]
			if offs == nil {
				offs = kadm.Offsets{}
			}
			for _, t := range tos {
				offs.Add(kadm.Offset{Topic: t.Topic, Partition: t.Partition, At: t.Offset, LeaderEpoch: -1})
			}
			commits[g] = offs
			out = append(out, tos...)
		}
	}
	if o.DryRun {
		return out, nil
	}
	for _, g := range o.Groups {
		if len(commits[g]) == 0 {
			continue
		}
		resp, err := dadm.CommitOffsets(ctx, g, commits[g])
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return out, fmt.Errorf("relay/kafka: committing the offsets of group %q on the destination: %w", g, err)
		}
	}
	return out, nil
}

// checkGroups refuses, without Force, groups with members on either
// cluster or with committed offsets on the destination.
func (o OffsetMigration) checkGroups(ctx context.Context, sadm, dadm *kadm.Client) error {
	if o.Force {
		return nil
	}
	var errs []error
	for _, side := range []struct {
		name string
		adm  *kadm.Client
	}{{"source", sadm}, {"destination", dadm}} {
		described, err := side.adm.DescribeGroups(ctx, o.Groups...)
		if err != nil {
			return fmt.Errorf("relay/kafka: describing the groups on the %s: %w", side.name, err)
		}
		for _, g := range o.Groups {
			d, ok := described[g]
			if ok && d.Err == nil && len(d.Members) > 0 {
				errs = append(errs, fmt.Errorf("%w: group %q has %d active member(s) on the %s (state %s): stop its consumers first, or pass --force",
					ErrGroupActive, g, len(d.Members), side.name, d.State))
			}
		}
	}
	for _, g := range o.Groups {
		fetched, err := dadm.FetchOffsets(ctx, g)
		if errors.Is(err, kerr.GroupIDNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("relay/kafka: reading the offsets of group %q on the destination: %w", g, err)
		}
		n := 0
		fetched.Each(func(r kadm.OffsetResponse) {
			if r.Err == nil && r.At >= 0 {
				n++
			}
		})
		if n > 0 {
			errs = append(errs, fmt.Errorf("%w: group %q already has committed offsets on %d destination partition(s): pass --force to overwrite them", ErrGroupActive, g, n))
		}
	}
	return errors.Join(errs...)
}

// translateTopic finds, for each partition of the destination topic dt,
// the first record whose source record (of source topic st) group g had
// not consumed according to committed (see OffsetMigration.Run).
func translateTopic(ctx context.Context, dadm *kadm.Client, dstOpts []kgo.Opt, g, st, dt string, committed map[int32]int64) ([]TranslatedOffset, error) {
	ends, err := dadm.ListEndOffsets(ctx, dt)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("relay/kafka: listing the end offsets of %q on the destination: %w", dt, err)
	}
	starts, err := dadm.ListStartOffsets(ctx, dt)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("relay/kafka: listing the start offsets of %q on the destination: %w", dt, err)
	}
	from, to := map[int32]int64{}, map[int32]int64{}
	found := map[int32]*TranslatedOffset{}
	for p, e := range ends[dt] {
		to[p] = e.Offset
		s, _ := starts.Lookup(dt, p)
		from[p] = s.Offset
		found[p] = &TranslatedOffset{Group: g, FromTopic: st, Topic: dt, Partition: p, Offset: e.Offset}
	}
	var m relay.Message
	scanned, matched := 0, 0
	err = readPartitions(ctx, dstOpts, dt, from, to, func(r *kgo.Record) (bool, error) {
		t := found[r.Partition]
		t.Scanned++
		scanned++
		m = relay.Message{}
		decodeInto(&m, r, nil)
		v, ok := m.Metadata[relay.SourceKey]
		if !ok {
			return false, nil
		}
		_, topic, pos, err := relay.ParseSource(v)
		sp, ok := pos.Partition()
		if err != nil || topic != st || !ok {
			return false, nil
		}
		matched++
		if c, ok := committed[sp]; ok && pos.Offset() < c {
			return false, nil // consumed on the source
		}
		t.Offset = r.Offset
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if scanned > 0 && matched == 0 {
		// Without positions every record would look consumed, and the
		// group would skip to the end of every partition.
		return nil, fmt.Errorf("%w: none of the %d records read of %q on the destination names a position of source topic %q (did the route run with source_positions: true?); nothing committed",
			ErrNoSourcePositions, scanned, dt, st)
	}
	out := make([]TranslatedOffset, 0, len(found))
	for _, t := range found {
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b TranslatedOffset) int { return int(a.Partition - b.Partition) })
	return out, nil
}
