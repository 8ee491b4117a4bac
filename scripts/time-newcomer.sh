#!/usr/bin/env bash
# Times docs/development.md's path for trying Kafka or SQS without Docker, from a
# fresh clone of this repository: `make kafka` (or `make sqs`) in a
# terminal of its own until it serves, `make build` alongside, then one
# publish and one consume with bin/relay; then Ctrl-C. It prints one
# RESULT line. Set GOCACHE to an empty directory to time a cold build
# cache. Needs python3 (for the terminal) and the default ports free
# (9092, 4100). The figures are in docs/perf/newcomer.md.
#
#   scripts/time-newcomer.sh kafka|sqs
set -euo pipefail
kind=${1:?usage: scripts/time-newcomer.sh kafka|sqs}
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/relay-newcomer-XXXXXX")
trap 'touch "$work/stop"; wait; rm -rf "$work"' EXIT
now() { date +%s.%N; }
t0=$(now)
git clone -q "$src" "$work/relay"
cd "$work/relay"
# Terminal 1: make kafka|sqs in a pseudo-terminal; $work/up gets the
# seconds it took to print its banner, and $work/stop makes it type Ctrl-C.
python3 - "$kind" "$work" <<'PY' &
import os, pty, select, signal, sys, time
kind, work = sys.argv[1], sys.argv[2]
marker = b"Kafka (kfake" if kind == "kafka" else b"are up"
pid, fd = pty.fork()
if pid == 0:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.execvp("make", ["make", kind])
start, buf = time.time(), b""
while marker not in buf:
    try:
        buf += os.read(fd, 4096)
    except OSError:
        sys.exit("make %s ended before serving:\n%s" % (kind, buf.decode(errors="replace")))
open(os.path.join(work, "up"), "w").write("%.1f" % (time.time() - start))
while not os.path.exists(os.path.join(work, "stop")):
    if select.select([fd], [], [], 0.2)[0]:
        try:
            os.read(fd, 4096)
        except OSError:
            break
os.write(fd, b"\x03")
os.waitpid(pid, 0)
PY
# Terminal 2.
b0=$(now)
make build >/dev/null
b1=$(now)
while [ ! -f "$work/up" ]; do sleep 0.1; done
if [ "$kind" = kafka ]; then
	url=kafka://127.0.0.1:9092 group=(--group demo)
else
	export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
	url='sqs://?region=us-east-1&endpoint=http://127.0.0.1:4100' group=()
fi
p0=$(now)
bin/relay publish "$url" orders --data hello -q
p1=$(now)
bin/relay consume "$url" orders "${group[@]}" --count 1 --timeout 60s --format json >/dev/null
c1=$(now)
echo "RESULT $kind (GOCACHE=${GOCACHE:-default}): make $kind served after $(cat "$work/up") s;" \
	"make build alongside $(echo "$b1 - $b0" | bc) s; publish $(echo "($p1 - $p0) * 1000 / 1" | bc) ms;" \
	"consume $(echo "($c1 - $p1) * 1000 / 1" | bc) ms; clone to consumed $(echo "$c1 - $t0" | bc) s"
