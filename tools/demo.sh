#!/usr/bin/env bash
# make demo: the main job. Trains on Fashion-MNIST where the training example
# is built; until then runs the hello-world example.
set -eu
build=$1
if [ -x "$build/examples/train_fashion" ]; then
  exec "$build/examples/train_fashion" "${@:2}"
fi
exec "$build/examples/hello" "${@:2}"
