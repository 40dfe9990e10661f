#!/usr/bin/env bash
# Gives every global symbol of libaquila.a that lacks the aq_ prefix that
# prefix, in every tracked C source (the rule tools/check-symbols.sh
# enforces). Mechanical: whole words only, #include lines left alone; run
# it after a merge brings new internal globals, then build and test.
#   tools/prefix-symbols.sh [build/lib/libaquila.a]
set -eu
lib=${1:-build/lib/libaquila.a}
names=$(nm -g --defined-only "$lib" | awk 'NF == 3 && $3 !~ /^aq_/ { print $3 }' | sort -u)
[ -n "$names" ] || { echo "prefix-symbols: nothing to rename"; exit 0; }
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu')
expr=""
for n in $names; do
  case $n in
    # The API tables are used as cu.cuInit / rocr.hsa_init: only those uses
    # and the definitions, never the word (a driver's name, a file name).
    cu) expr+='s/\bcu\.([a-zA-Z])/aq_cu.\1/g; s/\bcuda_api_t cu;/cuda_api_t aq_cu;/; s/&cu\)/\&aq_cu)/g; s/resolves cu;/resolves aq_cu;/;' ;;
    rocr) expr+='s/\brocr\.hsa_/aq_rocr.hsa_/g; s/\brocr_api_t rocr;/rocr_api_t aq_rocr;/; s/&rocr\)/\&aq_rocr)/g; s/resolves rocr;/resolves aq_rocr;/;' ;;
    *) expr+="s/\\b$n\\b/aq_$n/g;" ;;
  esac
done
sed -i -E "/^#include/!{$expr}" "${files[@]}"
echo "prefix-symbols: renamed $(wc -w <<<"$names") symbols"
