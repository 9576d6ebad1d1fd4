#!/usr/bin/env bash
# Interleaved before/after of the peer workload on one machine: the code of
# BASE (a commit, unpacked with `git archive` to a scratch directory and put
# first on PYTHONPATH) against this checkout, ROUNDS rounds, before then after.
#
#   bash bench/lab/ab_peers.sh 6176f03        # 3 rounds → bench/lab/out/ab-6176f03/
#   ROUNDS=1 SYSTEMS="turnstream-kafka" bash bench/lab/ab_peers.sh HEAD~5
#
# Needs the broker and .venv-peers (make bench-peers creates it).
set -euo pipefail
base=${1:?usage: bench/lab/ab_peers.sh BASE_COMMIT}
rounds=${ROUNDS:-3}
systems=${SYSTEMS:-turnstream-kafka turnstream-embedded agents-run}
root=$(cd "$(dirname "$0")/../.." && pwd)
python=${PEERS_PYTHON:-$root/.venv-peers/bin/python}
short=$(git -C "$root" rev-parse --short "$base")
out=$root/bench/lab/out/ab-$short
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
git -C "$root" archive "$base" services schemas | tar -x -C "$scratch"
mkdir -p "$out"
cd "$root/bench"
for round in $(seq 1 "$rounds"); do
  for side in before after; do
    if [[ $side == before ]]; then path=$scratch/services; else path=$root/services; fi
    # shellcheck disable=SC2086  # the system names are separate words
    PYTHONPATH=$path "$python" peers/peers_bench.py --only $systems \
      --conversations 200 --turns 5 --latency-conversations 5 \
      --out "$out/$side-$round.json" --md "$out/$side-$round.md" >/dev/null
    echo "$side $round: $out/$side-$round.md"
  done
done
