#!/usr/bin/env bash
# Runs every test of the module the way CI does (the README's `make test`).
#
# 1. Makes sure the brokers the tests need are up: Redis on 127.0.0.1:6379,
#    RabbitMQ on 127.0.0.1:5672, PostgreSQL on 127.0.0.1:5432 (database
#    test, user postgres with trust authentication), NATS (JetStream) on
#    127.0.0.1:4222 and Mosquitto on 127.0.0.1:1883. A broker that is down
#    is started; Redis, RabbitMQ or Mosquitto (and mosquitto_pub/_sub) not
#    installed is installed with apt-get when running as root (PostgreSQL
#    must be installed with a cluster, nats-server installed).
#    RELAY_TEST_REDIS_URL / RELAY_TEST_AMQP_URL / RELAY_TEST_POSTGRES_URL /
#    RELAY_TEST_NATS_URL / RELAY_TEST_MQTT_URL point the tests at other
#    brokers instead: those are only checked, never started (the MQTT tests
#    start private mosquittos too, so mosquitto is installed either way). The status page's browser test needs
#    Chromium: installed the same way (Debian's chromium) when missing, or
#    RELAY_TEST_CHROMIUM names the binary. The sqlite:// interop tests use
#    the sqlite3 shell: installed the same way (Debian's sqlite3).
# 2. Runs `go vet ./...` and `go test -race ./...` with
#    RELAY_REQUIRE_BROKERS=1, so a test that cannot reach its broker fails
#    instead of skipping; then the same (and `go mod tidy -diff`) in the
#    separate modules examples/adapter, cloudevents/sdkinterop and
#    compat/watermill, whose
#    failure fails the run too.
#
# Kafka and SQS/SNS tests run against in-process fakes unless
# RELAY_TEST_KAFKA_BROKERS / RELAY_TEST_SQS_ENDPOINT name real ones.
#
# Usage: scripts/test.sh [PACKAGES...]   (default ./...)
# Environment: GO_TEST_FLAGS adds flags to go test (e.g. "-run TestFoo");
# RELAY_TEST_LOG names the file that keeps the full verbose output.
set -euo pipefail
cd "$(dirname "$0")/.."
PATH=$PATH:/usr/sbin:/sbin # where Debian puts rabbitmq-server and rabbitmqctl
pkgs=("$@")
((${#pkgs[@]})) || pkgs=(./...)

log=${RELAY_TEST_LOG:-${TMPDIR:-/tmp}/relay-test.log}
apt_updated=no

say() { printf '==> %s\n' "$*"; }
die() {
	printf '\nFAIL: %s\n' "$*" >&2
	exit 1
}

# port_open HOST PORT: is something listening there?
port_open() { timeout 3 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; }

# wait_port HOST PORT SECONDS
wait_port() {
	local i
	for ((i = 0; i < $3 * 2; i++)); do
		port_open "$1" "$2" && return 0
		sleep 0.5
	done
	return 1
}

# host_port URL DEFAULT_PORT: prints "host port" of a broker URL.
host_port() {
	local rest=${1#*://}
	rest=${rest##*@}   # drop user:password@
	rest=${rest%%/*}   # drop /path
	rest=${rest%%\?*}  # drop ?query
	local host=$rest port=$2
	if [[ $rest =~ ^\[(.*)\]:([0-9]+)$ ]]; then
		host=${BASH_REMATCH[1]} port=${BASH_REMATCH[2]}
	elif [[ $rest =~ ^\[(.*)\]$ ]]; then
		host=${BASH_REMATCH[1]}
	elif [[ $rest =~ ^(.*):([0-9]+)$ ]]; then
		host=${BASH_REMATCH[1]} port=${BASH_REMATCH[2]}
	fi
	echo "${host:-127.0.0.1} $port"
}

# install_if_missing PROGRAM HINT PACKAGE...: installs the Debian PACKAGEs
# if PROGRAM is missing (root with apt-get only; apt-get update runs once);
# otherwise dies saying what to install, or HINT.
install_if_missing() {
	local prog=$1 hint=$2
	shift 2
	command -v "$prog" >/dev/null 2>&1 && return 0
	if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
		die "$prog is not installed; install $* (Debian: apt-get install $*)${hint:+, or $hint}"
	fi
	if [[ $apt_updated == no ]]; then
		say "apt-get update (to install $*)"
		DEBIAN_FRONTEND=noninteractive apt-get update -q || die "apt-get update failed"
		apt_updated=yes
	fi
	say "installing $* with apt-get"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" ||
		die "apt-get install $* failed"
	command -v "$prog" >/dev/null 2>&1 || die "$prog still missing after apt-get install $*"
}

# check_external NAME URL DEFAULT_PORT: a broker named by an env var must
# already be running; we do not start other people's brokers.
check_external() {
	local hp
	hp=$(host_port "$2" "$3")
	set -- "$1" "$2" $hp
	if port_open "$3" "$4"; then
		say "$1: using $3:$4 from the environment"
		return 0
	fi
	die "$1 at $3:$4 (from the environment) is not reachable; start it or unset the variable to use the local one"
}

ensure_redis() {
	if [[ -n ${RELAY_TEST_REDIS_URL:-} ]]; then
		check_external Redis "$RELAY_TEST_REDIS_URL" 6379
		return
	fi
	if port_open 127.0.0.1 6379; then
		say "Redis: up on 127.0.0.1:6379"
		return
	fi
	install_if_missing redis-server "point RELAY_TEST_REDIS_URL / RELAY_TEST_AMQP_URL at running brokers" redis-server rabbitmq-server
	say "Redis: down on 127.0.0.1:6379, starting redis-server"
	mkdir -p /var/lib/redis /var/log/redis 2>/dev/null ||
		die "cannot create /var/lib/redis and /var/log/redis (run as root, or start Redis yourself on 127.0.0.1:6379)"
	redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
		--dir /var/lib/redis --logfile /var/log/redis/ci.log ||
		die "redis-server did not start; see /var/log/redis/ci.log"
	wait_port 127.0.0.1 6379 15 ||
		die "Redis was started but does not listen on 127.0.0.1:6379 after 15s; see /var/log/redis/ci.log"
	say "Redis: started"
}

ensure_rabbitmq() {
	if [[ -n ${RELAY_TEST_AMQP_URL:-} ]]; then
		check_external RabbitMQ "$RELAY_TEST_AMQP_URL" 5672
		return
	fi
	if port_open 127.0.0.1 5672; then
		say "RabbitMQ: up on 127.0.0.1:5672"
		return
	fi
	install_if_missing rabbitmq-server "point RELAY_TEST_REDIS_URL / RELAY_TEST_AMQP_URL at running brokers" redis-server rabbitmq-server
	say "RabbitMQ: down on 127.0.0.1:5672, starting rabbitmq-server (this takes a few seconds)"
	rabbitmq-server -detached || say "rabbitmq-server -detached failed; waiting in case a node is already starting"
	# await_startup returns once the broker app runs; it fails at once
	# while the Erlang node itself is still booting, so retry until 120s.
	local deadline=$((SECONDS + 120))
	until timeout 60 rabbitmqctl -q await_startup >/dev/null 2>&1; do
		((SECONDS < deadline)) ||
			die "RabbitMQ did not finish starting within 120s; see /var/log/rabbitmq/"
		sleep 2
	done
	wait_port 127.0.0.1 5672 30 ||
		die "RabbitMQ started but does not listen on 127.0.0.1:5672; see /var/log/rabbitmq/"
	say "RabbitMQ: started"
}

ensure_postgres() {
	if [[ -n ${RELAY_TEST_POSTGRES_URL:-} ]]; then
		check_external PostgreSQL "$RELAY_TEST_POSTGRES_URL" 5432
		return
	fi
	if port_open 127.0.0.1 5432; then
		say "PostgreSQL: up on 127.0.0.1:5432"
		return
	fi
	command -v pg_ctlcluster >/dev/null 2>&1 ||
		die "PostgreSQL is down on 127.0.0.1:5432 and pg_ctlcluster is missing (install postgresql, or set RELAY_TEST_POSTGRES_URL)"
	local version
	version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
	[[ -n $version ]] ||
		die "PostgreSQL is down on 127.0.0.1:5432 and no cluster is configured under /etc/postgresql"
	say "PostgreSQL: down on 127.0.0.1:5432, starting cluster $version/main"
	pg_ctlcluster --skip-systemctl-redirect "$version" main start ||
		die "pg_ctlcluster $version main start failed; see /var/log/postgresql/"
	wait_port 127.0.0.1 5432 30 ||
		die "PostgreSQL was started but does not listen on 127.0.0.1:5432 after 30s; see /var/log/postgresql/"
	say "PostgreSQL: started"
}

ensure_nats() {
	if [[ -n ${RELAY_TEST_NATS_URL:-} ]]; then
		check_external NATS "$RELAY_TEST_NATS_URL" 4222
		return
	fi
	if port_open 127.0.0.1 4222; then
		say "NATS: up on 127.0.0.1:4222"
		return
	fi
	[[ -x /usr/sbin/nats-server ]] ||
		die "nats-server is not installed at /usr/sbin/nats-server (Debian: apt-get install nats-server), or point RELAY_TEST_NATS_URL at a running server with JetStream (-js)"
	say "NATS: down on 127.0.0.1:4222, starting nats-server with JetStream"
	mkdir -p /var/lib/nats-server 2>/dev/null ||
		die "cannot create /var/lib/nats-server (run as root, or start nats-server -js yourself on 127.0.0.1:4222)"
	start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
		-a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log ||
		die "nats-server did not start; see /var/log/nats-server.log"
	wait_port 127.0.0.1 4222 15 ||
		die "nats-server was started but does not listen on 127.0.0.1:4222 after 15s; see /var/log/nats-server.log"
	say "NATS: started"
}

# The MQTT tests use the broker on 127.0.0.1:1883 (or RELAY_TEST_MQTT_URL),
# start private mosquittos of their own (restarts, the conformance suite)
# and run mosquitto_pub and mosquitto_sub (interop): Debian's mosquitto and
# mosquitto-clients.
ensure_mosquitto() {
	install_if_missing mosquitto "" mosquitto mosquitto-clients
	install_if_missing mosquitto_sub "" mosquitto-clients
	if [[ -n ${RELAY_TEST_MQTT_URL:-} ]]; then
		check_external Mosquitto "$RELAY_TEST_MQTT_URL" 1883
		return
	fi
	if port_open 127.0.0.1 1883; then
		say "Mosquitto: up on 127.0.0.1:1883"
		return
	fi
	say "Mosquitto: down on 127.0.0.1:1883, starting mosquitto"
	local conf=${TMPDIR:-/tmp}/relay-mosquitto.conf
	printf 'listener 1883 127.0.0.1\nallow_anonymous true\n' >"$conf"
	mosquitto -d -c "$conf" || die "mosquitto did not start (config $conf)"
	wait_port 127.0.0.1 1883 15 ||
		die "mosquitto was started but does not listen on 127.0.0.1:1883 after 15s"
	say "Mosquitto: started"
}

# The status page's browser test (package bridge) drives a headless
# Chromium: $RELAY_TEST_CHROMIUM, or chromium / chromium-browser /
# google-chrome on PATH; Debian's chromium is installed when none is.
ensure_chromium() {
	if [[ -n ${RELAY_TEST_CHROMIUM:-} ]]; then
		command -v "$RELAY_TEST_CHROMIUM" >/dev/null 2>&1 ||
			die "RELAY_TEST_CHROMIUM=$RELAY_TEST_CHROMIUM is not an executable"
		say "Chromium: $RELAY_TEST_CHROMIUM from the environment"
		return
	fi
	local b
	for b in chromium chromium-browser google-chrome; do
		if command -v "$b" >/dev/null 2>&1; then
			say "Chromium: $(command -v "$b")"
			return
		fi
	done
	install_if_missing chromium "set RELAY_TEST_CHROMIUM to a Chromium or Chrome binary" chromium
	say "Chromium: installed $(command -v chromium)"
}

command -v go >/dev/null 2>&1 || die "go is not on PATH (need Go $(sed -n 's/^go //p' go.mod))"
say "$(go version)"
ensure_redis
ensure_rabbitmq
ensure_postgres
ensure_nats
ensure_mosquitto
ensure_chromium
install_if_missing sqlite3 "" sqlite3 # the sqlite:// interop tests run the shell
for v in RELAY_TEST_KAFKA_BROKERS RELAY_TEST_SQS_ENDPOINT; do
	if [[ -n ${!v:-} ]]; then
		say "$v=${!v}"
	fi
done
export RELAY_REQUIRE_BROKERS=1
# Tests talk to loopback only: never let the AWS SDK ask the EC2 metadata
# service (a link-local address) for credentials when a test sets none.
export AWS_EC2_METADATA_DISABLED=true

say "go vet ${pkgs[*]}"
vet=ok
go vet "${pkgs[@]}" || vet=FAILED

# go.mod and go.sum must be exactly what `go mod tidy` makes of them.
say "go mod tidy -diff"
tidy=ok
go mod tidy -diff || tidy=FAILED

# -v lets the conformance suite's report (what it checked, what it skipped
# and why) through. The screen gets everything but per-test RUN/PASS lines
# and the log lines (slog/log, timestamped) that tests provoke on purpose;
# the log file keeps all of it.
# Test binaries are built in parallel first, then run one package at a
# time (-p 1): several packages' tests restart the shared Redis and
# RabbitMQ, and a restart must not land in the middle of another package's
# test. Within a package, tests run in sequence anyway.
say "building test binaries"
go test -race -count=1 -run '^$' "${pkgs[@]}" >/dev/null || true
say "go test -race -count=1 -p 1 -timeout 25m ${GO_TEST_FLAGS:-}${GO_TEST_FLAGS:+ }${pkgs[*]}  (full output: $log)"
set +e
# shellcheck disable=SC2086 # GO_TEST_FLAGS is a list of flags
go test -race -count=1 -p 1 -timeout 25m -v ${GO_TEST_FLAGS:-} "${pkgs[@]}" 2>&1 |
	tee "$log" |
	grep --line-buffered -Ev '^[[:space:]]*(=== (RUN|PAUSE|CONT|NAME)|--- PASS:|PASS$)|^[0-9]{4}/[0-9]{2}/[0-9]{2} [0-9:]{8} '
test_rc=${PIPESTATUS[0]}
set -e

# examples/adapter (an adapter written outside this module, on the public
# packages only) and cloudevents/sdkinterop (the CloudEvents Go SDK interop
# tests, kept out of relay's go.mod) are modules of their own: vet, tidy
# and test them too. Their -v output goes to the same log, so their tests
# are counted below.
ext=ok
for mod in examples/adapter cloudevents/sdkinterop; do
	say "$mod: go vet, go mod tidy -diff, go test -race"
	(cd "$mod" && go vet ./...) || ext=FAILED
	(cd "$mod" && go mod tidy -diff) || ext=FAILED
	set +e
	(cd "$mod" && go test -race -count=1 -v ./... 2>&1) |
		tee -a "$log" |
		grep --line-buffered -Ev '^[[:space:]]*(=== (RUN|PAUSE|CONT|NAME)|--- PASS:|PASS$)|^[0-9]{4}/[0-9]{2}/[0-9]{2} [0-9:]{8} '
	[[ ${PIPESTATUS[0]} == 0 ]] || ext=FAILED
	set -e
done

# compat/watermill is a module of its own too (relay <-> Watermill, so that
# this module does not depend on Watermill): vet, tidy and test it the same
# way. Its tests run Watermill's universal Pub/Sub tests against mem://,
# redis://, amqp:// and kafka:// (kfake) and the conformance suite against
# Watermill's GoChannel (about 40s).
say "compat/watermill: go vet, go mod tidy -diff, go test -race"
wmill=ok
(cd compat/watermill && go vet ./...) || wmill=FAILED
(cd compat/watermill && go mod tidy -diff) || wmill=FAILED
set +e
(cd compat/watermill && go test -race -count=1 -timeout 10m -v ./... 2>&1) |
	tee -a "$log" |
	grep --line-buffered -Ev '^[[:space:]]*(=== (RUN|PAUSE|CONT|NAME)|--- PASS:|PASS$)|^[0-9]{4}/[0-9]{2}/[0-9]{2} [0-9:]{8} |^(publishing message|restarting server|server restarted)$'
[[ ${PIPESTATUS[0]} == 0 ]] || wmill=FAILED
set -e

count() { grep -Ec "$1" "$log" || true; }
passed=$(count '^[[:space:]]*--- PASS:')
failed=$(count '^[[:space:]]*--- FAIL:')
skipped=$(count '^[[:space:]]*--- SKIP:')
pkg_ok=$(count '^ok[[:space:]]')
pkg_fail=$(count '^FAIL[[:space:]]')

echo
echo "summary:"
echo "  go vet:   $vet"
echo "  go.mod:   tidy $tidy"
echo "  packages: $pkg_ok ok, $pkg_fail failed"
echo "  examples/adapter, cloudevents/sdkinterop: $ext"
echo "  compat/watermill: $wmill"
if ((pkg_fail > 0)); then
	grep -E '^FAIL[[:space:]]' "$log" | sed 's/^/    /'
fi
if ((skipped > 0)); then
	echo "  skipped tests (reasons above and in $log):"
	grep -E '^[[:space:]]*--- SKIP:' "$log" | sed 's/^[[:space:]]*/    /'
fi
if [[ $vet == ok && $tidy == ok && $test_rc == 0 && $ext == ok && $wmill == ok ]]; then
	echo "  result:   PASS"
else
	echo "  result:   FAIL (go vet $vet, go mod tidy $tidy, go test exit $test_rc, separate modules $ext, compat/watermill $wmill)"
fi
echo "tests: $passed passed, $failed failed, $skipped skipped"
[[ $vet == ok && $tidy == ok && $test_rc == 0 && $ext == ok && $wmill == ok ]]
