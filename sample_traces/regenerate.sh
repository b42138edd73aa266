#!/usr/bin/env bash
# Regenerate every shipped sample trace from the simulator, with fixed seeds and step counts.
#   bash sample_traces/regenerate.sh          (from any directory; rlscope must be importable)
# Each run directory is replaced. tests/test_simulator.py reads the `gen` lines below to check
# that the shipped copies are what this script produces.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"

gen() {  # gen SCENARIO STEPS SEED
  rm -rf "${here:?}/$1"
  "$python" -m rlscope simulate --scenario "$1" --steps "$2" --seed "$3" --out "$here/$1"
}

gen healthy-colocated 30 0
gen longtail-8b 10 0
gen separated-8b 4 0
gen async-drift 20 0
gen agentic-failing-reward 24 0
gen moe-mismatch 20 0
