// Package testkit holds, in its subpackages, everything of this module that
// only tests, benchmarks and the fault scenarios use; no production code
// imports it:
//
//   - testenv: finding the brokers the tests need (and failing under CI
//     when one is missing), their restart hooks and locks, the fault
//     proxy, the goaws SQS service, test certificates;
//   - relaytest: the helpers adapter tests share (provision, publish,
//     subscribe, next message) and the ratio benchmarks against raw
//     clients;
//   - kfakeopts: the settings of kfake clusters (tests, and the
//     standalone internal/cmd/kfakeserver);
//   - servercmd: the main and the test start-up of those standalone
//     commands;
//   - pubsubfake: pstest, the Pub/Sub client library's fake server,
//     served restartably (tests, and the standalone
//     internal/cmd/pstestserver);
//   - faultrows: the rows the fault scenarios write and faults/report
//     reads.
//
// The public test kit for adapters, in this module or outside it, is
// driver/drivertest.
package testkit
