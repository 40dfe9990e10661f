#!/usr/bin/env bash
# GPU checks of auto-tuning (branch conv-tune), for the lead to run on the
# GPU machine from the repository root with build/ carried (make -j2 all
# build/tests/gpu here first). Everything goes to a fresh AQ_PERF_DIR, so
# the first start tunes and the next ones read tuned.tsv:
#  1. tests/gpu's gpu_tune suite (tests/gpu/tune.c);
#  2. aq-bench conv --agent gpu --explain over the LeNet CNN's shapes and
#     the default ones: per shape and pass, tuned or the rule's build;
#  3. aq-info's tuned builds;
#  4. the CNN step, tuned (AQ_TUNE=1, tuned.tsv read) and with the rule's
#     builds (AQ_TUNE=0), 100 steps each, then aq-bench conv itself.
set -u
cd "$(dirname "$0")"
perf=$(mktemp -d /tmp/aq-devcheck-tune-XXXXXX)
export AQ_PERF_DIR=$perf
status=0
if ! build/bin/aq-info | grep -q "kind GPU"; then
  echo "devcheck-tune: no GPU agent here (aq-info); nothing to check"
  exit 2
fi
step() { echo; echo "== $*"; }

step "gpu_tune suite"
build/tests/gpu --filter 'gpu_tune/*' --verbose 2>&1 | tail -20 || status=1

cnn="256,1,28,28,6,5,5,1,2;256,6,14,14,16,5,5,1,0"
step "aq-bench conv --explain (the CNN's convs, then the defaults): tunes, then says"
build/bin/aq-bench conv --agent gpu --explain --shapes "$cnn" || status=1
build/bin/aq-bench conv --agent gpu --explain || status=1
step "aq-info: tuned builds"
build/bin/aq-info | sed -n '/^Tuned builds/,/^$/p'
step "tuned.tsv"
cat "$perf/tuned.tsv"

step "aq-bench train --model cnn --placement gpu, tuned (first start tunes the step's shapes)"
AQ_TUNE=1 build/bin/aq-bench train --model cnn --placement gpu --steps 100 || status=1
step "the same, tuned.tsv read (nothing timed: tuned.tsv unchanged)"
before=$(md5sum "$perf/tuned.tsv")
AQ_TUNE=1 build/bin/aq-bench train --model cnn --placement gpu --steps 100 || status=1
[ "$before" = "$(md5sum "$perf/tuned.tsv")" ] && echo "tuned.tsv unchanged" || { echo "tuned.tsv CHANGED"; status=1; }
step "the same with the launch rule's builds (AQ_TUNE=0)"
AQ_TUNE=0 build/bin/aq-bench train --model cnn --placement gpu --steps 100 || status=1

step "aq-bench conv --agent gpu (the builds the scheduler runs, against cuDNN)"
build/bin/aq-bench conv --agent gpu --shapes "$cnn" --dtype f32 || status=1

rm -rf "$perf"
echo; echo "devcheck-tune: $([ $status = 0 ] && echo ok || echo FAILED)"
exit $status
