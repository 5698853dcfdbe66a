#!/bin/bash
# Three fresh default runs in a row with both cores of a 2-core machine kept busy by two busy loops (started 20 s
# before the first), then the test suite in a fresh clone under the same load. Run from the checkout, in an
# environment that has the README's test install; each run's terminal output goes to $WORK/loaded<N>.log.
set -u
repo="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
WORK="${WORK:-$(mktemp -d)}"
python3 -c "while True: pass" & busy1=$!
python3 -c "while True: pass" & busy2=$!
trap 'kill $busy1 $busy2' EXIT
sleep 20
for run in 1 2 3; do
  git clone -q "$repo" "$WORK/loaded$run" && cd "$WORK/loaded$run" || exit 1
  uptime > "$WORK/loaded$run.uptime"
  /usr/bin/time -f "wall %e s" snakemake --cores 1 paper/figures/all > "$WORK/loaded$run.log" 2>&1
  echo "rc=$?" >> "$WORK/loaded$run.log"
  uptime >> "$WORK/loaded$run.uptime"
done
git clone -q "$repo" "$WORK/loadedsuite" && cd "$WORK/loadedsuite" || exit 1
/usr/bin/time -f "wall %e s" python3 -m pytest -q > "$WORK/loadedsuite.log" 2>&1
echo "rc=$?" >> "$WORK/loadedsuite.log"
