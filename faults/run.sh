#!/usr/bin/env bash
# `make faults`: the fault-injection scenarios, the fuzz targets for a
# bounded time, then docs/reliability.md regenerated from the results.
#
# Needs Redis, RabbitMQ and PostgreSQL up as for `make test` (scripts/test.sh starts
# them; CI runs it first), and mosquitto installed (the MQTT rows start
# brokers of their own). A missing broker fails, it is not skipped.
# Kafka runs on kfake and SQS on goaws, in process / as a subprocess.
#
# Environment: FUZZTIME (per fuzz target: a count such as 50000x or a
# duration such as 20s; default a count per target, below; "0" skips
# fuzzing), FAULTS_RUN (a -run pattern to narrow the scenarios).
#
# The default budgets are execution counts, not durations: with a duration,
# Go 1.26's fuzz coordinator can report a spurious "context deadline
# exceeded" failure when the time runs out while a worker is busy
# (golang/go#75804, fixed in Go 1.27), which a loaded CI machine hits now
# and then. Each count is about 20 s of fuzzing on the 2-core CI machine.
set -uo pipefail
cd "$(dirname "$0")/.."
export RELAY_REQUIRE_BROKERS=1
# Tests talk to loopback only: never let the AWS SDK ask the EC2 metadata
# service (a link-local address) for credentials when a test sets none.
export AWS_EC2_METADATA_DISABLED=true
fuzztime=${FUZZTIME:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/relay-faults.XXXXXX")
trap 'rm -rf "$work"' EXIT
results=$work/results.jsonl fuzz=$work/fuzz.jsonl log=${RELAY_FAULTS_LOG:-${TMPDIR:-/tmp}/relay-faults.log}
: >"$results" >"$fuzz"
start=$SECONDS

# The scenarios of packages that keep their own fault tests (the PostgreSQL
# inbox's SIGKILL test, the request/reply server's SIGKILL test) run in the
# same go test call.
# -timeout: the scenarios took 13–14 min in CI under -race (the two 1 MiB
# bridge-memory runs alone about 200 s each: the race detector slows the
# handling of 1 MiB payloads about sixteenfold), which a slower VM pushed
# past the former 14 min limit; 25 min leaves room without hiding a hang.
echo "==> fault scenarios: go test -race -tags faults ./faults ./adapters/postgres/inbox ./reqreply (full output: $log)"
RELAY_FAULTS_RESULTS=$results go test -race -tags faults -count=1 -p 1 -timeout 25m -v \
	${FAULTS_RUN:+-run "$FAULTS_RUN"} ./faults/ ./adapters/postgres/inbox/ ./reqreply/ >"$log" 2>&1
tests_rc=$?
grep -E '^(--- |ok |FAIL|PASS)|RESULT' "$log" | sed 's/^ *//'
tests_ok=true
((tests_rc == 0)) || tests_ok=false

# package, target, default budget: every fuzz target of the module.
targets=(
	".                      FuzzOpenURL      40000x"
	"./bridge               FuzzParse        12000x"
	"./adapters/redisstream FuzzDecode       200000x"
	"./adapters/amqp        FuzzDecode       200000x"
	"./adapters/kafka       FuzzDecodeRecord 150000x"
	"./adapters/sqs         FuzzDecode       200000x"
	"./adapters/nats        FuzzDecode       200000x"
	"./adapters/gcppubsub   FuzzDecode       100000x"
	"./adapters/mqtt        FuzzDecode       100000x"
)
fuzz_ok=true
if [[ $fuzztime != 0 ]]; then
	for t in "${targets[@]}"; do
		read -r pkg name budget <<<"$t"
		budget=${fuzztime:-$budget}
		echo "==> fuzz $pkg $name for $budget"
		t0=$SECONDS
		out=$(go test -run '^$' -fuzz "^${name}\$" -fuzztime "$budget" -timeout 10m "$pkg" 2>&1)
		rc=$?
		execs=$(grep -oE 'execs: [0-9]+' <<<"$out" | tail -1 | grep -oE '[0-9]+' || true)
		ok=true
		if ((rc != 0)); then
			ok=false fuzz_ok=false
			echo "$out" | tail -30
		fi
		input=$(grep -oE 'testdata/fuzz/[^ ]+' <<<"$out" | head -1 || true)
		printf '{"target":"%s","package":"%s","seconds":%d,"execs":%d,"ok":%s,"input":"%s"}\n' \
			"$name" "$pkg" $((SECONDS - t0)) "${execs:-0}" "$ok" "$input" >>"$fuzz"
	done
fi

go run ./faults/report -results "$results" -fuzz "$fuzz" -doc docs/reliability.md \
	-tests-ok=$tests_ok -took $((SECONDS - start))s
report_rc=$?
echo "==> make faults took $((SECONDS - start))s"
if [[ $tests_ok != true || $fuzz_ok != true || $report_rc != 0 ]]; then
	echo "FAIL: faults (scenarios ok=$tests_ok, fuzz ok=$fuzz_ok; see $log)" >&2
	exit 1
fi
echo "PASS: faults"
