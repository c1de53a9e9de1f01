#!/usr/bin/env bash
# Checks what nbits-bench and nbits-plan do without a GPU: help, lists,
# option errors, plans, and every renderer over the synthetic sample reports
# here (JSON read back and written again byte for byte, CSV, table, SVG).
# Usage: check_cpu_modes.sh BUILD_DIR (holding nbits-bench and nbits-plan).
set -uo pipefail
build=${1:?usage: check_cpu_modes.sh BUILD_DIR}
bench="$build/nbits-bench"
plan="$build/nbits-plan"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0

# expect STATUS COMMAND...: the command must exit with STATUS.
expect() {
  local want=$1
  shift
  "$@" >"$work/out" 2>"$work/err"
  local got=$?
  if [ "$got" -ne "$want" ]; then
    echo "FAIL (exit $got, wanted $want): $*"
    sed 's/^/  | /' "$work/err" | head -5
    failed=1
  fi
}

expect 0 "$bench" --help
expect 0 "$bench" --list
expect 2 "$bench" --bogus
expect 2 "$bench" --json --csv
expect 2 "$bench" --plan --csv
expect 2 "$bench" --host-overhead --sweep decode
expect 2 "$bench" --quick --m 2
expect 2 "$bench" --sweep prefill --model Qwen2.5-0.5B
expect 0 "$bench" --plan --quick
expect 0 "$bench" --plan --quick --json --out "$work/plans.json"
expect 0 "$bench" --plan --sweep prefill --act bf16 --m 2,2048
expect 0 "$bench" --plan --act f32 --model Qwen2.5-0.5B
expect 4 "$bench" --from-json "$work/missing.json"

for sample in sample_timing sample_host_overhead; do
  expect 0 "$bench" --from-json "$here/$sample.json"
  expect 0 "$bench" --from-json "$here/$sample.json" --csv
  expect 0 "$bench" --from-json "$here/$sample.json" --json --out "$work/$sample.json"
  if ! cmp -s "$here/$sample.json" "$work/$sample.json"; then
    echo "FAIL: $sample.json does not survive --from-json --json unchanged"
    failed=1
  fi
done
expect 0 "$bench" --from-json "$here/sample_timing.json" --plot "$work/plot.svg"
if ! grep -q "read ceiling" "$work/plot.svg" || ! tail -n 1 "$work/plot.svg" | grep -q "</svg>"; then
  echo "FAIL: the SVG lacks the ceiling line or its end"
  failed=1
fi
if command -v xmllint >/dev/null && ! xmllint --noout "$work/plot.svg"; then
  echo "FAIL: the SVG is not well-formed XML"
  failed=1
fi

expect 0 "$plan" --help
expect 0 "$plan" --K 4096 --N 6144
expect 0 "$plan" --K 4096 --N 6144 --policy fastest --device rtx5090 --json
expect 2 "$plan"
expect 2 "$plan" --K 4096 --N 6144 --device nope
expect 1 "$plan" --K 4096 --N 6144 --bits 5

[ "$failed" -eq 0 ] && echo "check_cpu_modes: all passed"
exit "$failed"
