#!/bin/bash
# Whole processes, as a user runs them, before and after a change, interleaved (ROUNDS rounds), each
# under /usr/bin/time: open + metadata, `info`, `check`, open + dequantize every tensor.
# Prints "SIDE COMMAND wall_s user_s sys_s max_rss_kb exit" per run.
#
#   BEFORE_DIR=checkout BEFORE_PY=its-venv/bin/python AFTER_DIR=. AFTER_PY=python MODEL=file.gguf \
#     benchmarks/before_after_process.sh
# Each checkout needs its compiled extensions built in place (pip install -e in its venv).
set -u
: "${BEFORE_DIR:?}" "${BEFORE_PY:?}" "${AFTER_DIR:?}" "${AFTER_PY:?}" "${MODEL:?}"
ROUNDS=${ROUNDS:-5}
err=$(mktemp)
trap 'rm -f "$err"' EXIT
uptime
for _ in $(seq "$ROUNDS"); do
  for side in before after; do
    if [ "$side" = before ]; then py=$BEFORE_PY; dir=$BEFORE_DIR; else py=$AFTER_PY; dir=$AFTER_DIR; fi
    for cmd in open info check dequantize; do
      case $cmd in
        open) args=(-c "import gguf_schema; f = gguf_schema.open('$MODEL'); len(f.metadata)") ;;
        info) args=(-m gguf_schema info "$MODEL") ;;
        check) args=(-m gguf_schema check "$MODEL") ;;
        dequantize) args=(-c "import gguf_schema; f = gguf_schema.open('$MODEL'); [t.dequantize() for t in f.tensor_list]") ;;
      esac
      # run from the checkout, so that its own gguf_schema is the one imported
      (cd "$dir" && /usr/bin/time -f "$side $cmd %e %U %S %M %x" "$py" "${args[@]}" > /dev/null 2> "$err"; tail -1 "$err")
    done
  done
done
uptime
