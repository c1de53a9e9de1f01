#!/usr/bin/env bash
# Checks what nbits-bench, nbits-plan and nbits-startup do without a GPU:
# help, lists, option errors, plans, developer overrides, NVRTC-only startup
# timing, and every renderer over the synthetic sample reports here (JSON read
# back and written again byte for byte, CSV, table, SVG).
# Usage: check_cpu_modes.sh BUILD_DIR (holding the three tools). CTest runs it
# as tools_cpu_modes.
set -uo pipefail
build=${1:?usage: check_cpu_modes.sh BUILD_DIR}
bench="$build/nbits-bench"
plan="$build/nbits-plan"
startup="$build/nbits-startup"
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
expect 2 "$bench" --sweep decode --proj up
if ! grep -q -- "--shape up:" "$work/err"; then
  echo "FAIL: a sweep filtered to none of its nodes does not point at --shape"
  failed=1
fi
expect 0 "$bench" --plan --sweep decode --shape up:4096,14336 --m 2,8
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
if ! grep -q "read ceiling" "$work/plot.svg" || ! grep -q "read floor" "$work/plot.svg" ||
  ! tail -n 1 "$work/plot.svg" | grep -q "</svg>"; then
  echo "FAIL: the SVG lacks the ceiling line, the read floor or its end"
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

# contains FILE TEXT: FILE (the last command's stdout) must hold TEXT.
contains() {
  if ! grep -qF -- "$2" "$1"; then
    echo "FAIL: the output lacks: $2"
    sed 's/^/  | /' "$1" | head -5
    failed=1
  fi
}

# --read-floor's column: the row's time against the streaming read of its bytes.
expect 0 "$bench" --from-json "$here/sample_timing.json"
contains "$work/out" "132 SMs (clusters of 2/3/4 at once: 66/39/30)"
contains "$work/out" "%floor"
contains "$work/out" "      7.50    83.3"
contains "$work/out" "  -10.0%"
contains "$work/out" "+sk: 1 of 1 rows compared, faster on 1, slower on 0; -10.0% to -10.0%, median -10.0%"
expect 0 "$bench" --from-json "$here/sample_timing.json" --csv
contains "$work/out" "read_floor_us,percent_of_read_floor,percent_against_plan"
contains "$work/out" ",7.500,83.33,"
contains "$work/out" ",fastest,sk,ok,fast_prefill_stream_k,"
contains "$work/out" ",-10.00"

# Developer overrides: flags and the environment reach the plan; what they refuse is ignored.
expect 0 "$plan" --K 4096 --N 6144 --m 128 --policy fastest --prefill-split-k 4
contains "$work/out" "variant: nbits_prefill_wgmma"
contains "$work/out" "-DNBITS_SPLIT_K=4"
contains "$work/out" "grid 48x1x4 block 256x1x1"
expect 0 env NBITS_PREFILL_SPLIT_K=2 "$plan" --K 4096 --N 6144 --m 128 --policy fastest
contains "$work/out" "K split over clusters of 2 CTAs"
expect 0 env NBITS_PREFILL_SPLIT_K=1 "$plan" --K 4096 --N 6144 --m 128 --policy fastest
contains "$work/out" "variant: nbits_prefill_dequantize_cublaslt"
expect 0 env NBITS_PREFILL_SPLIT_K=9 "$plan" --K 4096 --N 6144 --m 128 --policy fastest
contains "$work/out" "grid 48x1x4 block 256x1x1"
expect 0 "$plan" --K 4096 --N 6144 --m 64 --policy fastest --prefill-wgmma-min-m 17
contains "$work/out" "-DNBITS_TILE_M=64"
expect 0 env NBITS_PREFILL_WGMMA_MIN_M=17 "$plan" --K 4096 --N 6144 --m 64 --policy fastest
contains "$work/out" "variant: nbits_prefill_wgmma"
expect 0 "$plan" --K 8192 --N 28672 --m 128 --policy fastest --prefill-wgmma-tile-n 256
contains "$work/out" "grid 112x1x1 block 512x1x1 shared 134144 bytes"

# --overrides: each row again under a labelled set of developer overrides; what nbits would ignore is refused.
expect 0 "$bench" --plan --shape 3584,18944,512 --policy fastest --overrides sk:NBITS_PREFILL_STREAM_K=1
contains "$work/out" "+sk: NBITS_PREFILL_STREAM_K=1"
contains "$work/out" "policy fastest+sk"
contains "$work/out" "kernel nbits_prefill_gemm_stream_k"
expect 0 "$bench" --plan --shape 3584,18944,512 --policy fastest --overrides sk:NBITS_PREFILL_STREAM_K=1 --json
contains "$work/out" '"overrides": "sk"'
expect 2 "$bench" --plan --quick --overrides sk:NBITS_PREFILL_STREAM_K=2
expect 2 "$bench" --plan --quick --overrides sk:NBITS_NO_SUCH_OVERRIDE=1
expect 2 "$bench" --plan --quick --overrides NBITS_PREFILL_STREAM_K=1
expect 2 "$bench" --plan --quick --overrides a:NBITS_DECODE_PDL=0 --overrides a:NBITS_DECODE_PDL=1
expect 2 "$bench" --from-json "$here/sample_timing.json" --overrides a:NBITS_DECODE_PDL=0
expect 0 "$bench" --from-json "$here/sample_timing.json"
contains "$work/out" "fastest+sk  fast_prefill_stream_k"
expect 0 "$bench" --from-json "$here/sample_timing.json" --csv
contains "$work/out" ",prefill,fastest,sk,ok,fast_prefill_stream_k,"
expect 0 "$bench" --from-json "$here/sample_timing.json" --plot "$work/plot.svg"
contains "$work/plot.svg" "fastest+sk: 668.1 TFLOP/s"

expect 0 "$startup" --help
contains "$work/out" "--jit-image"
expect 2 "$startup" --bogus
expect 2 "$startup" --repeat 0
expect 2 "$startup" --child
expect 2 "$startup" --child --cache-dir "$work/cache" --jit-image elf
expect 0 "$startup" --compile-only --repeat 1 --json
contains "$work/out" '"measurement": "compile-only"'
contains "$work/out" '"compute_90"'
contains "$work/out" '"sm_90"'

[ "$failed" -eq 0 ] && echo "check_cpu_modes: all passed"
exit "$failed"
