#!/usr/bin/env bash
# Runs a broker emulator in the foreground, to try relay on Kafka or
# SQS/SNS without Docker or a cloud account (`make kafka`, `make sqs`):
#
#   scripts/dev.sh kafka   franz-go's kfake, a Kafka wire-protocol cluster
#                          in memory (internal/cmd/kfakeserver), on
#                          127.0.0.1:$KAFKA_PORT (default 9092)
#   scripts/dev.sh sqs     goaws v0.5.4 (SQS and SNS; the version go.mod's
#                          tool directive pins), on port $SQS_PORT
#                          (default 4100)
#
# Once the emulator answers, it prints the relay URL and the environment
# to use, then runs until Ctrl-C. Nothing is kept: a restart starts empty.
# The first run compiles the emulator (Go's build cache keeps it).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
dir=$(mktemp -d "${TMPDIR:-/tmp}/relay-dev-XXXXXX")
trap 'rm -rf "$dir"' EXIT

# waitport waits until something listens on 127.0.0.1:$1, or the process
# $2 exits.
waitport() {
	for _ in $(seq 1200); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
			return 0
		fi
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# run starts the emulator (its arguments), waits for port $1, prints the
# banner from stdin, and waits for the emulator; Ctrl-C stops it.
run() {
	local port=$1 banner
	shift
	banner=$(cat)
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		echo "scripts/dev.sh: something listens on 127.0.0.1:$port already (an emulator started earlier?); choose another port with KAFKA_PORT= or SQS_PORT=" >&2
		exit 1
	fi
	"$@" &
	local pid=$!
	trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; exit 0' INT TERM
	if ! waitport "$port" "$pid"; then
		echo "scripts/dev.sh: the emulator did not start listening on 127.0.0.1:$port" >&2
		kill -TERM "$pid" 2>/dev/null || true
		exit 1
	fi
	printf '%s\n' "$banner"
	wait "$pid"
}

case ${1:-} in
kafka)
	port=${KAFKA_PORT:-9092}
	echo "==> $GO build ./internal/cmd/kfakeserver" >&2
	"$GO" build -o "$dir/kfakeserver" ./internal/cmd/kfakeserver
	run "$port" "$dir/kfakeserver" -port "$port" <<EOF

Kafka (kfake, in memory) is up. In another terminal:

  relay publish kafka://127.0.0.1:$port orders --data hello
  relay consume kafka://127.0.0.1:$port orders --group demo --idle 5s
  go run ./examples/checkout -broker kafka://127.0.0.1:$port

(relay is bin/relay after "make build", or "go run ./cmd/relay".)
Tests: RELAY_TEST_KAFKA_BROKERS=127.0.0.1:$port. Ctrl-C stops it; nothing is kept.
EOF
	;;
sqs)
	port=${SQS_PORT:-4100}
	cat >"$dir/goaws.yaml" <<EOF
Local:
  Host: 127.0.0.1
  Port: $port
  Region: us-east-1
  AccountId: "100010001000"
  LogToFile: false
  EnableDuplicates: false
  QueueAttributeDefaults:
    VisibilityTimeout: 30
    ReceiveMessageWaitTimeSeconds: 0
    MaximumMessageSize: 1048576
EOF
	# go tool -n builds the tool go.mod pins (once; the build cache keeps
	# it) and prints its path, so that the emulator runs as this script's
	# child and Ctrl-C stops it.
	echo "==> $GO tool github.com/Admiral-Piett/goaws/app/cmd" >&2
	goaws=$("$GO" tool -n github.com/Admiral-Piett/goaws/app/cmd)
	run "$port" "$goaws" -config "$dir/goaws.yaml" -loglevel warn Local <<EOF

SQS and SNS (goaws v0.5.4, in memory) are up; goaws listens on every
interface (0.0.0.0:$port): it has no setting to keep to loopback. goaws
takes any credentials, but the AWS SDK wants some. In another terminal:

  export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
  relay publish 'sqs://?region=us-east-1&endpoint=http://127.0.0.1:$port' orders --data hello
  relay consume 'sqs://?region=us-east-1&endpoint=http://127.0.0.1:$port' orders --idle 5s

  SNS (a queue per group; goaws cannot set queue policies, hence queue_policy=false):
  relay provision 'sns://?region=us-east-1&endpoint=http://127.0.0.1:$port&queue_policy=false' orders --group billing
  relay publish 'sns://?region=us-east-1&endpoint=http://127.0.0.1:$port&queue_policy=false' orders --data hello

(relay is bin/relay after "make build", or "go run ./cmd/relay".)
Ctrl-C stops it; nothing is kept.
EOF
	;;
*)
	echo "usage: scripts/dev.sh kafka|sqs   (KAFKA_PORT, SQS_PORT choose the port)" >&2
	exit 2
	;;
esac
