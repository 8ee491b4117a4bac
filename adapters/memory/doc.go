// Package memory is the in-process backend (mem://NAME): the embedded
// default and the reference semantics every other adapter is measured by.
//
// Every mem://NAME opened in one process shares the broker NAME; nothing
// crosses process boundaries and nothing survives the process. Semantics:
//
//   - A group is a queue of competing consumers; every group of a topic
//     gets its own copy of each message.
//   - At-least-once: a message leaves its group only on Ack. Unsettled
//     messages return to the group at once when a subscription ends.
//   - Nack redelivers with Attempt+1; NackAfter delays it natively.
//   - Messages are delivered in publish order; a redelivered message goes
//     back to its original place in the queue.
//   - Messages published to a topic that has no group yet are kept (the
//     newest 10,000 and at most 64 MiB; older ones are dropped) and handed
//     to the first group created by Subscribe or Provision. Groups created
//     later start empty.
//   - Queues of existing groups are not bounded, like a broker's.
//   - Lag (relay.LagReporter) counts every message of the topic the group
//     has not acked: queued, delayed by NackAfter, or delivered and
//     unsettled.
//
// URL: mem://NAME?group=G&inflight=N&max_bytes=B (see docs/contract.md). Both sides
// accept all three parameters and ignore those of the other side.
package memory
