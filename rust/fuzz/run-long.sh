#!/usr/bin/env bash
# Run one fuzz target for SECONDS on one core and log a one-line summary (docs/fuzzing.md).
#
#   bash rust/fuzz/run-long.sh TARGET SECONDS
#
# TARGET: capture_reader | capture_merge | tcp_reassembly | amqp_decoder | amqp10_performatives. The corpus grows outside git in
# $FUZZ_CORPUS/TARGET (default: fuzz-corpus/ next to the repository, /work/fuzz-corpus here);
# an empty corpus is seeded from fixtures/ by make_seeds.py, and the committed
# regressions/TARGET inputs are always loaded too. Crashes, hangs (-timeout=10 s) and
# out-of-memory inputs (-rss_limit_mb=2048) go to $FUZZ_ARTIFACTS/TARGET/ (default
# $FUZZ_CORPUS/artifacts). The summary
# line (date, target, seconds, execs, corpus, crashes) is appended to $FUZZ_RUNS_LOG (default
# rust/fuzz/RUNS.md; set it empty to log nothing, as the CI smoke run does).
# Exit status: 0 when the run ended without a crash or hang, 1 otherwise.
set -euo pipefail
# Everything is in main, read whole before it runs: editing or checking out this file during
# an hour-long run does not change the running script.
main() {
  here=$(cd "$(dirname "$0")" && pwd)
  repo=$(cd "$here/../.." && pwd)
  if [ $# -ne 2 ]; then
    echo "usage: $0 TARGET SECONDS   (TARGET: capture_reader, capture_merge, tcp_reassembly, amqp_decoder, amqp10_performatives)" >&2
    exit 64
  fi
  target=$1
  seconds=$2
  case $target in
    capture_reader) max_len=65536 ;;
    capture_merge) max_len=65536 ;;
    tcp_reassembly) max_len=16384 ;;
    amqp_decoder) max_len=65536 ;;
    amqp10_performatives) max_len=16384 ;;
    *) echo "unknown target $target" >&2; exit 64 ;;
  esac
  [[ $seconds =~ ^[0-9]+$ ]] || { echo "SECONDS must be a whole number" >&2; exit 64; }

  if [ -f "$HOME/.cargo/env" ]; then . "$HOME/.cargo/env"; fi
  corpus_root=${FUZZ_CORPUS:-$(cd "$repo/.." && pwd)/fuzz-corpus}
  log_file=${FUZZ_RUNS_LOG-$here/RUNS.md}
  corpus=$corpus_root/$target
  artifacts=${FUZZ_ARTIFACTS:-$corpus_root/artifacts}/$target
  mkdir -p "$corpus" "$artifacts"
  if [ -z "$(ls -A "$corpus")" ]; then
    python3 "$here/make_seeds.py" "$corpus_root" >&2
  fi

  # The commit the target is built from (+dirty: with uncommitted changes to the core).
  commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo "?")
  if [ -n "$(git -C "$repo" status --porcelain -- rust/src rust/fuzz/fuzz_targets 2>/dev/null)" ]; then commit="$commit+dirty"; fi
  # cargo-fuzz's defaults: release with debug assertions (overflow checks) and AddressSanitizer.
  (cd "$repo/rust" && nice -n 10 cargo +nightly fuzz build "$target" >&2)
  bin=$(ls -d "$here"/target/*/release/"$target" | head -1)

  before=$(ls "$artifacts" | grep -cE '^(crash|timeout|oom|leak)-' || true)
  out=$(mktemp)
  trap 'rm -f "$out"' EXIT
  start=$(date +%s)
  set +e
  # One process, one worker: libFuzzer uses one core. New inputs go to the first directory.
  nice -n 10 "$bin" "$corpus" "$here/regressions/$target" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="$max_len" \
    -print_final_stats=1 -artifact_prefix="$artifacts/" 2>&1 | tee "$out" | grep --line-buffered -vE '^#[0-9]+.*(NEW|REDUCE|pulse)' >&2
  status=${PIPESTATUS[0]}
  set -e
  elapsed=$(( $(date +%s) - start ))
  after=$(ls "$artifacts" | grep -cE '^(crash|timeout|oom|leak)-' || true)
  crashes=$(( after - before ))
  if [ "$status" -ne 0 ] && [ "$crashes" -eq 0 ]; then crashes=1; fi
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$out" | grep -oE '[0-9]+$' | tail -1)
  execs=${execs:-?}
  rate=$([ "$execs" != "?" ] && [ "$elapsed" -gt 0 ] && echo $(( execs / elapsed )) || echo "?")
  files=$(ls "$corpus" | wc -l)
  bytes=$(du -sb "$corpus" | cut -f1)
  line="| $(date -u +%Y-%m-%dT%H:%MZ) | $target | $elapsed | $execs | $rate | $files files, $bytes B | $crashes | $commit |"
  echo "$line" >&2
  if [ -n "$log_file" ]; then
    if [ ! -f "$log_file" ]; then
      printf '%s\n\n%s\n%s\n' "# Fuzz runs (rust/fuzz/run-long.sh; docs/fuzzing.md)" \
        "| ended (UTC) | target | seconds | execs | execs/s | corpus | crashes + hangs | commit |" \
        "|---|---|---|---|---|---|---|---|" > "$log_file"
    fi
    echo "$line" >> "$log_file"
  fi
  if [ "$crashes" -ne 0 ]; then
    echo "$target: crash or hang, input in $artifacts/ (docs/fuzzing.md: turning a crash into a regression)" >&2
    exit 1
  fi
}
main "$@"
exit
