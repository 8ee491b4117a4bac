// Package faults holds the fault-injection scenarios of relay: broker
// restarts, consumers killed with SIGKILL (also while holding delayed
// messages, Message.DeliverAt), misbehaving handlers, a
// 100k-message backlog and network faults (latency, bandwidth, resets, a
// black hole) injected by a proxy in front of each backend, and the peak
// memory of a `relay bridge` process forwarding small and 1 MiB messages
// (TestBridgeMemory, against the bound it documents), and three `relay
// bridge` replicas per source with one SIGKILLed, one frozen past its lease
// (SIGSTOP, then SIGCONT) or, on Kafka, one killed and a fourth added
// (replicas_test.go; leases of 2-3 s keep a freeze to seconds, and the
// sources run in parallel). Each publishes a known set of message IDs, injects
// its fault mid-stream and reconciles what arrived: every ID at least once
// (lost must be 0), duplicates counted, nothing unexpected. The
// at-most-once router SIGKILL scenario is the exception: it checks the
// loss against that guarantee's bound (the handlers running at the kill).
//
// The scenarios are tests behind the build tag "faults", so that the plain
// test suite does not run them; run them with `make faults`, which also
// runs the fuzz targets for a bounded time and regenerates
// docs/reliability.md from the results (see ./report).
package faults
