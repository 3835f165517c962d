# Sourced by .ci/run and .ci/podman: `step NAME COMMAND...` runs one part of CI and records its
# seconds and exit code; `trap ci_summary EXIT` prints every part's time at the end, also after a
# failure. A step is an executable, never a shell function: called under `||` (as `step` runs its
# command) bash ignores `set -e` inside a function, so a failing line in one would pass unseen.
# Never chain commands with && in these scripts: under `set -e` only the last of an && list stops
# the script when it fails.

_ci_parts=()
_ci_now=
_ci_since=0

_ci_result() {   # EXIT CODE -> ok or failed (exit N)
  if [ "$1" = 0 ]; then echo ok; else echo "failed (exit $1)"; fi
}

_ci_part() {   # NAME SECONDS RESULT
  _ci_parts+=("$(printf '%-16s %6d s  %s' "$1" "$2" "$3")")
}

step() {
  local name=$1 rc=0
  shift
  if [ "$(type -t "$1")" = function ]; then
    echo "ci: step $name runs the shell function $1: give it an executable (see .ci/steps.sh)" >&2
    exit 2
  fi
  echo "ci: $name"
  _ci_now=$name
  _ci_since=$SECONDS
  "$@" || rc=$?
  _ci_part "$name" $((SECONDS - _ci_since)) "$(_ci_result "$rc")"
  _ci_now=
  return "$rc"
}

ci_summary() {   # [EXIT CODE]: as the EXIT trap (its first line keeps the script's exit code), or from one
  local rc=${1:-$?}
  [ -z "$_ci_now" ] || _ci_part "$_ci_now" $((SECONDS - _ci_since)) "interrupted"
  echo "ci: time per part (${0##*/}):"
  [ "${#_ci_parts[@]}" = 0 ] || printf '  %s\n' "${_ci_parts[@]}"
  printf '  %-16s %6d s  %s\n' total "$SECONDS" "$(_ci_result "$rc")"
  return "$rc"
}
