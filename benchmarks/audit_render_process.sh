#!/bin/bash
# The audit as a user runs it, whole processes under /usr/bin/time, before and after the render became part of
# every audit (issue 34, part 5), interleaved (ROUNDS rounds): `gguf-schema audit FILE` with the checkout before
# (static analysis only), and with this checkout by default (the sandboxed render) and with --no-render.
# Prints "SIDE FILE wall_s user_s sys_s max_rss_kb exit" per run. /usr/bin/time measures the audit process; the
# render's child is a separate process: CHILD lines give its own figures (a render of the file's templates, as
# the audit starts it), measured the same way.
#
#   BEFORE_DIR=checkout BEFORE_PY=its-venv/bin/python AFTER_DIR=. AFTER_PY=python FILES="a.gguf b.gguf" \
#     benchmarks/audit_render_process.sh
set -u
: "${BEFORE_DIR:?}" "${BEFORE_PY:?}" "${AFTER_DIR:?}" "${AFTER_PY:?}" "${FILES:?}"
ROUNDS=${ROUNDS:-5}
err=$(mktemp)
trap 'rm -f "$err"' EXIT
uptime
for _ in $(seq "$ROUNDS"); do
  for file in $FILES; do
    name=$(basename "$file")
    for side in before after after-no-render; do
      case $side in
        before) py=$BEFORE_PY; dir=$BEFORE_DIR; extra=() ;;
        after) py=$AFTER_PY; dir=$AFTER_DIR; extra=() ;;
        after-no-render) py=$AFTER_PY; dir=$AFTER_DIR; extra=(--no-render) ;;
      esac
      (cd "$dir" && /usr/bin/time -f "$side $name %e %U %S %M %x" "$py" -m gguf_schema audit "$file" "${extra[@]}" \
        > /dev/null 2> "$err"; tail -1 "$err")
    done
  done
done
uptime
