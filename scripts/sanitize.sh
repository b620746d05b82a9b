#!/usr/bin/env bash
# The GPU suites under compute-sanitizer: each tool (memcheck, racecheck, initcheck, synccheck) over
# each GPU suite of a build, with gtest filters that keep every kernel family in (each quant kernel,
# the RMSNorm kernels, every GEMM backend and config of the build, LinearPlan) on small problems,
# and the suites' FP8ROUTE_TEST_QUICK=1 lists (tests/test_util.h): the instrumented kernels run
# 10-100x slower. The filters aim at about 8 minutes for the whole matrix on an H200 (each run's
# time is in the summary).
#
#   scripts/sanitize.sh [options] BUILD
#     BUILD        a build folder (its tests/ holds the test_* binaries), a folder of test_* binaries,
#                  or a .tar / .tar.gz / .tgz of either (unpacked into a temporary folder)
#     --tools LIST comma-separated subset of memcheck,racecheck,initcheck,synccheck (default: all)
#     --suites LIST comma-separated subset of the matrix's suites (--list shows them; default: all)
#     --quick      a smaller matrix: one or two tests per kernel family
#     --strict     count initcheck, synccheck and racecheck reports in cuBLASLt's own kernels too (below)
#     --timeout S  seconds per (tool, suite) run before it is stopped and counted as failed (default 300)
#     --log-dir D  one log per run and summary.txt (default: $OUT/sanitize if OUT is set, else
#                  /tmp/fp8route-sanitize)
#     --list       print the matrix (suite, tool, filter) and exit
#   Extra compute-sanitizer options: FP8ROUTE_SANITIZER_ARGS (e.g. "--kernel-name-exclude kns=foo").
#
# initcheck, synccheck and racecheck reports whose faulting kernel is cuBLASLt's (closed source: its kernels
# read their own workspace and synchronize in ways fp8route cannot see or change) are listed in the
# summary and kept in the log, but do not fail the run unless --strict; the kernel names matched are
# FP8ROUTE_SANITIZER_FOREIGN (an extended regex, default "nvjet|xmma|cublasLt|splitKreduce"; ""
# matches none). An uninitialized operand fp8route hands to cuBLASLt is reported in cuBLASLt's kernel
# too: read those lines.
#
# compute-sanitizer: $COMPUTE_SANITIZER, else on PATH, else under /usr/local/cuda (bin/ or
# compute-sanitizer/). The tests find shapes/models.json and routes/ through FP8ROUTE_SOURCE_DIR
# (this tree, unless set). Prints one line per (tool, suite): the sanitizer's error count, the
# tests passed / failed / skipped and the time; exits 1 if any run reports an error, a failed test,
# a crash, a timeout or no test run (all skipped: no SM90 GPU), 2 on a usage error.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# ---- the matrix -----------------------------------------------------------------------------------
# Per suite: the filter of the full matrix (FULL), racecheck's (RACE: it tracks every shared-memory
# access, the slowest tool, kept to the smaller problems), other tools' where they differ
# (BY_TOOL["tool suite"]), and --quick's (QUICK, every tool). Left out of
# every filter: tests of numerics over huge inputs (LargeOddT, ScaleDivisions over every float),
# timing (LinearPlanGpu.Probe*), many repetitions or streams released at once
# (GraphsReplayedConcurrently, PerTensorDynamicGraphsReplayedConcurrently, test_determinism), the
# model-shape sweeps (ModelShapesAgainstReference, DecodeBackend.EveryModelShapeAtDecodeM: the
# same kernels at sizes up to 1.7 GB), and test_large_sizes (operands of 2^31 elements).
declare -A FULL RACE QUICK QUICK_RACE BY_TOOL QUICK_BY_TOOL
suites=(test_quant test_norm test_gemm test_linear test_bad_inputs test_conventions test_attention test_accum
        test_linear_scales)

FULL[test_quant]="GroupQuantGpu.EveryCombinationBitExact:GroupQuantGpu.StridedRowsBitExact:GroupQuantGpu.DeterministicAndGraphCapturable:GroupQuantGpu.FusedSiluAndMulWithinTolerance:GroupQuantGpu.Masked*:GroupQuantGpu.Scatter*:RowQuantGpu.PerTokenBitExact:RowQuantGpu.PerTensorStaticSaturatesAtTheBoundary:RowQuantGpu.PerTensorDynamicBitExact:RowQuantGpu.PerTensorDynamicStridedRows:RowQuantGpu.PerTensorDynamicLeavesNoStateBehind:RowQuantGpu.PerTensorDynamicEmptyWritesTheFloorScale:QuantArgs.NothingWrittenOnError"
RACE[test_quant]="GroupQuantGpu.EveryCombinationBitExact:GroupQuantGpu.StridedRowsBitExact:GroupQuantGpu.DeterministicAndGraphCapturable:GroupQuantGpu.Masked*:GroupQuantGpu.ScatterToDestinationRows:GroupQuantGpu.ScatterDuplicateDestinationsTakeOneTokenWhole:RowQuantGpu.PerTokenBitExact:RowQuantGpu.PerTensorStaticSaturatesAtTheBoundary:RowQuantGpu.PerTensorDynamicStridedRows:RowQuantGpu.PerTensorDynamicLeavesNoStateBehind"
QUICK[test_quant]="GroupQuantGpu.StridedRowsBitExact:GroupQuantGpu.DeterministicAndGraphCapturable:GroupQuantGpu.MaskedFusedSiluAndMul:GroupQuantGpu.ScatterToDestinationRows:RowQuantGpu.PerTokenBitExact:RowQuantGpu.PerTensorStaticSaturatesAtTheBoundary:RowQuantGpu.PerTensorDynamicStridedRows"

FULL[test_norm]="RmsNormGpu.*:RmsNormArgs.*"
RACE[test_norm]="RmsNormGpu.ValuesAndResidualBitExact:RmsNormGpu.InPlaceForms:RmsNormGpu.PerTokenAndStaticPerTensorBitExact:RmsNormGpu.DeterministicUnderGraphReplayWithAndWithoutPdl"
QUICK[test_norm]="${RACE[test_norm]}"

# Every config of every backend: AllConfigsExactOnSmallIntegers (quick: each once per scale kind and
# output dtype); the reference kernel: GemmReference; workspaces under capture, element-aligned
# scales, PDL chains of the decode backend, LinearPlan's scale forms.
FULL[test_gemm]="GemmReference.MatchesCpuReference:GemmBackends.AllConfigsExactOnSmallIntegers:WgmmaBackend.EdgesOfEveryConfig:GemmBackends.OddShapesRouteToACorrectBackend:GemmBackends.FirstCallOnAStreamUnderCapture:GemmBackends.ElementAlignedScalesAndBiasRunOnFastBackends:DecodeBackend.DependentLaunchChainReadsEachStepsActivations:LinearPlanGpu.RunsTheReportedRouteWithItsScaleForm"
RACE[test_gemm]="GemmReference.MatchesCpuReference:GemmBackends.AllConfigsExactOnSmallIntegers:GemmBackends.FirstCallOnAStreamUnderCapture:WgmmaBackend.EdgesOfEveryConfig"
# initcheck: the prepared and staged scale copies (LinearPlan); synccheck: the PDL chain. Memcheck
# alone takes the element-aligned scales and the odd shapes.
BY_TOOL["initcheck test_gemm"]="${RACE[test_gemm]}:LinearPlanGpu.RunsTheReportedRouteWithItsScaleForm"
BY_TOOL["synccheck test_gemm"]="${RACE[test_gemm]}:DecodeBackend.DependentLaunchChainReadsEachStepsActivations"
QUICK[test_gemm]="GemmReference.MatchesCpuReference:GemmBackends.AllConfigsExactOnSmallIntegers"
# racecheck over every config (AllConfigsExactOnSmallIntegers) ran past 90 s on an H200 even in the
# quick lists: --quick racecheck takes the reference kernel and the decode backend's PDL chain.
QUICK_RACE[test_gemm]="GemmReference.MatchesCpuReference:DecodeBackend.DependentLaunchChainReadsEachStepsActivations"
# --quick keeps what each of these tools is for: initcheck the prepared scale copies, synccheck the
# PDL chain.
QUICK_BY_TOOL["initcheck test_gemm"]="${QUICK[test_gemm]}:LinearPlanGpu.RunsTheReportedRouteWithItsScaleForm"
QUICK_BY_TOOL["synccheck test_gemm"]="${QUICK[test_gemm]}:DecodeBackend.DependentLaunchChainReadsEachStepsActivations"

FULL[test_linear]="LinearPlanGpu.*"
RACE[test_linear]="${FULL[test_linear]}"
QUICK[test_linear]="${FULL[test_linear]}"

FULL[test_bad_inputs]="BadInputs.*"  # with a GPU: nothing may be launched or written by a call that raises
RACE[test_bad_inputs]="${FULL[test_bad_inputs]}"
QUICK[test_bad_inputs]="${FULL[test_bad_inputs]}"

FULL[test_conventions]="ConventionsGpu.*"  # the engine layouts, the block scale_a gather, under graph replay
RACE[test_conventions]="ConventionsGpu.GatheredScaleAUnderGraphReplay"
QUICK[test_conventions]="ConventionsGpu.GatheredScaleAUnderGraphReplay"


FULL[test_accum]="AccumGpu.*"  # precise-class configs at large K, the heuristic's precise fallback
RACE[test_accum]="${FULL[test_accum]}"
QUICK[test_accum]="${FULL[test_accum]}"

FULL[test_linear_scales]="LinearPlanScalesGpu.*"  # LinearPlan's gathered block scale_a, eager and replayed
RACE[test_linear_scales]="${FULL[test_linear_scales]}"
QUICK[test_linear_scales]="LinearPlanScalesGpu.GatheredScalesReplayFromAGraph"

FULL[test_attention]="*DecodeAttentionGpu*-*RepeatRunsAreBitIdentical*"
RACE[test_attention]="${FULL[test_attention]}"
QUICK[test_attention]="${FULL[test_attention]}"

# Suites with nothing for a sanitizer (CPU only), and GPU suites left out on purpose (above).
not_in_matrix="test_core test_cutlass_headers (host only: no CUDA call for a sanitizer to attach to) test_reference_numerics test_layout test_reference_quant test_reference_gemm test_gemm_args test_route test_route_log test_table_load test_threads test_determinism test_large_sizes"
all_tools=(memcheck racecheck initcheck synccheck)
# cuBLASLt's kernel names (Hopper: nvjet_*, *_xmma_*; its split-K reduction and epilogues).
foreign_re="${FP8ROUTE_SANITIZER_FOREIGN-nvjet|xmma|cublasLt|splitKreduce}"

usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 2; }

# ---- arguments ------------------------------------------------------------------------------------
tools=("${all_tools[@]}")
want_suites=()
quick=0 strict=0 timeout_s=300 list=0 build=""
log_dir="${OUT:+$OUT/sanitize}"
log_dir="${log_dir:-/tmp/fp8route-sanitize}"
while [ $# -gt 0 ]; do
  case "$1" in
    --tools) IFS=, read -r -a tools <<< "${2:?--tools needs a list}"; shift 2 ;;
    --suites) IFS=, read -r -a want_suites <<< "${2:?--suites needs a list}"; shift 2 ;;
    --quick) quick=1; shift ;;
    --strict) strict=1; shift ;;
    --timeout) timeout_s="${2:?--timeout needs seconds}"; shift 2 ;;
    --log-dir) log_dir="${2:?--log-dir needs a folder}"; shift 2 ;;
    --list) list=1; shift ;;
    -h|--help) usage ;;
    -*) echo "sanitize: unknown option $1" >&2; usage ;;
    *) [ -z "$build" ] || { echo "sanitize: one BUILD only (got '$build' and '$1')" >&2; exit 2; }; build="$1"; shift ;;
  esac
done
for t in "${tools[@]}"; do
  case " ${all_tools[*]} " in *" $t "*) ;; *) echo "sanitize: unknown tool '$t' (${all_tools[*]})" >&2; exit 2 ;; esac
done
for s in "${want_suites[@]}"; do
  [ -n "${FULL[$s]+x}" ] || { echo "sanitize: '$s' is not in the matrix (${suites[*]})" >&2; exit 2; }
done
[ ${#want_suites[@]} -gt 0 ] && suites=("${want_suites[@]}")
[[ "$timeout_s" =~ ^[0-9]+$ ]] || { echo "sanitize: --timeout takes whole seconds, got '$timeout_s'" >&2; exit 2; }

filter_of() {  # suite tool
  if [ "$quick" = 1 ] && [ "$2" = racecheck ] && [ -n "${QUICK_RACE[$1]+x}" ]; then echo "${QUICK_RACE[$1]}"
  elif [ "$quick" = 1 ] && [ -n "${QUICK_BY_TOOL["$2 $1"]+x}" ]; then echo "${QUICK_BY_TOOL["$2 $1"]}"
  elif [ "$quick" = 1 ]; then echo "${QUICK[$1]}"
  elif [ "$2" = racecheck ]; then echo "${RACE[$1]}"
  elif [ -n "${BY_TOOL["$2 $1"]+x}" ]; then echo "${BY_TOOL["$2 $1"]}"
  else echo "${FULL[$1]}"; fi
}

if [ "$list" = 1 ]; then
  for s in "${suites[@]}"; do
    for t in "${tools[@]}"; do printf '%-22s %-10s %s\n' "$s" "$t" "$(filter_of "$s" "$t")"; done
  done
  echo "not in the matrix: $not_in_matrix"
  [ "$strict" = 1 ] || echo "initcheck, synccheck, racecheck: reports in kernels matching /${foreign_re}/ (cuBLASLt) not counted (--strict counts them)"
  exit 0
fi
[ -n "$build" ] || { echo "sanitize: BUILD missing" >&2; usage; }

# ---- the binaries ---------------------------------------------------------------------------------
tmp=""
# shellcheck disable=SC2317  # run by the trap
cleanup() { [ -z "$tmp" ] || rm -rf "$tmp"; }
trap cleanup EXIT
if [ -f "$build" ]; then
  case "$build" in
    *.tar|*.tar.gz|*.tgz) ;;
    *) echo "sanitize: $build is a file but not a .tar, .tar.gz or .tgz" >&2; exit 2 ;;
  esac
  tmp="$(mktemp -d "${TMPDIR:-/tmp}/fp8route-sanitize.XXXXXX")"
  tar -xf "$build" -C "$tmp" || { echo "sanitize: cannot unpack $build" >&2; exit 2; }
  build="$tmp"
fi
[ -d "$build" ] || { echo "sanitize: no folder or tarball $build" >&2; exit 2; }
bin=""
for d in "$build/tests" "$build" "$build"/*/tests "$build"/*/*/tests; do
  if [ -d "$d" ] && compgen -G "$d/test_*" > /dev/null; then bin="$(cd "$d" && pwd)"; break; fi
done
[ -n "$bin" ] || { echo "sanitize: no test_* binaries in $build, $build/tests or a tests/ folder below" >&2; exit 2; }

sanitizer="${COMPUTE_SANITIZER:-}"
if [ -z "$sanitizer" ]; then
  for c in "$(command -v compute-sanitizer 2>/dev/null)" /usr/local/cuda/bin/compute-sanitizer \
           /usr/local/cuda/compute-sanitizer/compute-sanitizer "${CUDA_HOME:-/nonexistent}/bin/compute-sanitizer"; do
    if [ -n "$c" ] && [ -x "$c" ]; then sanitizer="$c"; break; fi
  done
fi
if [ -z "$sanitizer" ] || [ ! -x "$sanitizer" ]; then
  echo "sanitize: compute-sanitizer not found (PATH, /usr/local/cuda/bin, /usr/local/cuda/compute-sanitizer; or set COMPUTE_SANITIZER)" >&2
  exit 2
fi

mkdir -p "$log_dir" || exit 2
export FP8ROUTE_TEST_QUICK=1
export FP8ROUTE_SOURCE_DIR="${FP8ROUTE_SOURCE_DIR:-$root}"
# Only the kernels a test runs get instrumented (the default since CUDA 12.2; made explicit).
export CUDA_MODULE_LOADING="${CUDA_MODULE_LOADING:-LAZY}"
summary="$log_dir/summary.txt"
{
  echo "compute-sanitizer: $sanitizer ($("$sanitizer" --version 2>/dev/null | grep -i version | tail -1))"
  echo "binaries: $bin"
  echo "matrix: ${tools[*]} x ${suites[*]}$([ "$quick" = 1 ] && echo ' (--quick)')$([ "$strict" = 1 ] && echo ' (--strict)')"
  echo "logs: $log_dir"
} | tee "$summary"

# Exit code the sanitizer gives when it found errors (distinct from a failed test's 1).
err_rc=97
# API calls that return an error are the tests' to check (several provoke them on purpose); the
# sanitizer reports device-side errors only.
# Every report printed where foreign ones are subtracted (initcheck, synccheck, racecheck without
# --strict: each must be told apart by its kernel; cuBLASLt's split-K reduction alone can make tens
# of thousands); 200 otherwise.
common=(--error-exitcode "$err_rc" --report-api-errors no)
# shellcheck disable=SC2206
extra=(${FP8ROUTE_SANITIZER_ARGS:-})

# The device-side reports of a log whose faulting kernel ("at ..." line, first frame) matches
# foreign_re. A report: a line "========= X" (X not a space), then its "=========     " lines;
# host API reports (a cudaMemcpy reading uninitialized memory) always count.
foreign_reports() {
  awk -v re="$foreign_re" '
    function done() { if (inrep && device && hit) n++; inrep = 0 }
    /^========= [^ ]/ {
      done()
      if ($0 !~ /ERROR SUMMARY|COMPUTE-SANITIZER|RACECHECK SUMMARY/) {
        inrep = 1; device = $0 !~ /Host API/; hit = 0; seen_at = 0
        if ($0 ~ /Race reported between/) { seen_at = 1; if ($0 ~ /Error: Race/ && $0 ~ re) hit = 1 }  # racecheck: kernel on the line
      }
      next
    }
    /^=========     / {
      if (inrep && !seen_at && $0 ~ /^=========     at /) { seen_at = 1; if ($0 ~ re) hit = 1 }
      next
    }
    { done() }
    END { done(); print n + 0 }' "$1"
}

bad=0
start_all=$(date +%s)
present=()
for s in "${suites[@]}"; do [ -x "$bin/$s" ] && present+=("$s"); done
for t in "${tools[@]}"; do
  for s in "${suites[@]}"; do
    if [ ! -x "$bin/$s" ]; then
      printf '%-10s %-22s not built here\n' "$t" "$s" | tee -a "$summary"
      continue
    fi
    log="$log_dir/$t.$s.log"
    filter="$(filter_of "$s" "$t")"
    t0=$(date +%s)
    limit=200
    [ "$strict" = 1 ] || [ -z "$foreign_re" ] || [ "$t" = memcheck ] || limit=0
    timeout --kill-after=15 "$timeout_s" "$sanitizer" --tool "$t" "${common[@]}" --print-limit "$limit" "${extra[@]}" \
      "$bin/$s" --gtest_brief=1 --gtest_filter="$filter" > "$log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - t0 ))
    # memcheck, initcheck, synccheck: "ERROR SUMMARY: N errors"; racecheck: "RACECHECK SUMMARY:
    # N hazards displayed (E errors, W warnings)" (warnings are not counted).
    errors=$(grep -aoE 'ERROR SUMMARY: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$')
    race=$(grep -aoE 'RACECHECK SUMMARY: .*\(([0-9]+) error' "$log" | tail -1 | grep -oE '\([0-9]+' | tr -d '(')
    warnings=$(grep -aoE 'RACECHECK SUMMARY: .*[0-9]+ warning' "$log" | tail -1 | grep -oE '[0-9]+ warning' | grep -oE '[0-9]+')
    if [ -n "$race" ] && { [ -z "$errors" ] || [ "$race" -gt "$errors" ]; }; then errors=$race; fi
    foreign=0
    if [ -n "$errors" ] && [ "$errors" -gt 0 ] && [ "$strict" = 0 ] && [ -n "$foreign_re" ] &&
       [ "$t" != memcheck ]; then
      foreign=$(foreign_reports "$log")
      [ "$foreign" -le "$errors" ] || foreign=$errors
      errors=$((errors - foreign))
    fi
    passed=$(grep -aoE '^\[  PASSED  \] [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$'); passed=${passed:-0}
    failed=$(grep -aoE '^\[  FAILED  \] [0-9]+ test' "$log" | tail -1 | grep -oE '[0-9]+'); failed=${failed:-0}
    skipped=$(grep -aoE '^\[  SKIPPED \] [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$'); skipped=${skipped:-0}
    status=ok
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then status="TIMEOUT after ${timeout_s}s"
    elif [ -z "$errors" ]; then status="NO SANITIZER SUMMARY (crashed? rc=$rc)"
    elif [ "$errors" -gt 0 ]; then status="ERRORS"
    elif [ "$failed" -gt 0 ] || { [ "$rc" != 0 ] && [ "$rc" != "$err_rc" ]; }; then status="TESTS FAILED (rc=$rc)"
    elif [ "$passed" = 0 ]; then status="NOTHING RAN (every test skipped: see the log)"
    fi
    run_ok=1
    [ "$status" = ok ] || { run_ok=0; bad=1; }
    [ "${warnings:-0}" = 0 ] || status="$status ($warnings race warnings, not counted)"
    [ "$foreign" = 0 ] || status="$status ($foreign in cuBLASLt kernels, not counted: see the log, --strict counts them)"
    printf '%-10s %-22s errors %-5s tests %3s passed %2s failed %2s skipped %5ss  %s\n' "$t" "$s" "${errors:--}" \
      "$passed" "$failed" "$skipped" "$secs" "$status" | tee -a "$summary"
    if [ "$run_ok" = 0 ]; then
      grep -aE '^========= (Invalid|Program hit|Error|Uninitialized|Host API|Barrier|Race|Warning)|^\[  FAILED  \]' "$log" \
        | sort | uniq -c | sort -rn | head -8 | sed 's/^/    /' | tee -a "$summary"
    fi
  done
done
others=()
for f in "$bin"/test_*; do
  n=$(basename "$f")
  [ -x "$f" ] && [ -z "${FULL[$n]+x}" ] && [[ " $not_in_matrix " != *" $n "* ]] && [[ "$n" != *.xml ]] && others+=("$n")
done
[ ${#others[@]} -eq 0 ] || echo "not in the matrix (add a filter to scripts/sanitize.sh): ${others[*]}" | tee -a "$summary"
[ ${#present[@]} -gt 0 ] || { echo "sanitize: none of the matrix's suites is built in $bin" | tee -a "$summary"; bad=1; }
echo "total $(( $(date +%s) - start_all ))s: $([ "$bad" = 0 ] && echo 'no errors' || echo 'FAILED (see above and the logs)')" | tee -a "$summary"
exit "$bad"
