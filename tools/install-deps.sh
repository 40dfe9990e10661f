#!/usr/bin/env bash
# Installs the Debian packages Aquila builds and runs with, where missing.
# Run by make when a dependency is not found; says what it installs.
set -eu
need=()
have_pc() { pkg-config --exists "$1" 2>/dev/null; }
command -v pkg-config >/dev/null || need+=(pkg-config)
# The host-side checks of the CUDA index maps (tests/unit/*.cc) are C++.
command -v g++ >/dev/null || need+=(g++)
have_pc hwloc || need+=(libhwloc-dev)
have_pc numa || need+=(libnuma-dev)
have_pc criterion || need+=(libcriterion-dev)
have_pc openblas || need+=(libopenblas-dev)
have_pc zlib || need+=(zlib1g-dev)
have_pc starpu-1.3 || need+=(libstarpu-dev)
[ -f /usr/include/hsa/hsa.h ] || need+=(libhsa-runtime-dev)
have_pc libhsakmt || need+=(libhsakmt-dev)
# MPI ranks and CPU collectives (libmpi.so.40 is loaded at run time; the
# tests launch ranks with mpirun).
have_pc ompi-c || need+=(libopenmpi-dev)
command -v mpirun >/dev/null || need+=(openmpi-bin)
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || need+=(dataset-fashion-mnist)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
echo "aquila: installing missing Debian packages: ${need[*]}" >&2
if [ "$(id -u)" != 0 ]; then
  echo "aquila: not root; run: sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2 || true
apt-get install -y -qq "${need[@]}" >&2
