"""How long a long-lived sandbox (`up`, a dev container) lives: its main process."""

from __future__ import annotations

from launcher.plan import PROBE_BUSYBOX

# The main process of a long-lived sandbox (`up`, a dev container). It ends the container when
# limits.session is up, whoever is attached, or when none of the sandbox's terminals had input or
# output for limits.idle (a pty's access and modification times, which the kernel keeps to 8 s):
# work without a terminal does not count. Before either end (5 minutes, half of a short limit)
# it writes a notice to every terminal; what that notice writes is not counted as activity. Only
# the probe's busybox runs, and SIGTERM (`sandbox down`) ends it at once.
UP_MAIN = f"""trap 'exit 143' TERM
max=$1 idle=$2 bb={PROBE_BUSYBOX}
now() {{ "$bb" date +%s; }}
lead() {{ if [ $(($1 / 2)) -lt 300 ]; then echo $(($1 / 2)); else echo 300; fi; }}
tell() {{
  for t in /dev/pts/[0-9]*; do echo "sandbox: $1" >"$t"; done 2>/dev/null
  quiet=$(($(now) + 9))
}}
start=$(now) quiet=0 warned_end= warned_idle=
end=$((start + max)) last=$start end_lead=$(lead "$max") idle_lead=$(lead "$idle")
step=$(( (end_lead < idle_lead ? end_lead : idle_lead) / 4 + 1 ))
[ "$step" -le 15 ] || step=15
while :; do
  for t in /dev/pts/[0-9]*; do
    times=$("$bb" stat -c '%X %Y' "$t" 2>/dev/null) || continue
    input=${{times% *}} output=${{times#* }}
    [ "$input" -le "$last" ] || last=$input
    [ "$output" -le "$quiet" ] || [ "$output" -le "$last" ] || last=$output
  done
  n=$(now)
  if [ "$n" -ge "$end" ]; then echo "sandbox: the session ended: limits.session ($max s)"; exit 0; fi
  if [ $((n - last)) -ge "$idle" ]; then echo "sandbox: the session ended: no terminal input or output for $idle s (limits.idle)"; exit 0; fi
  if [ -z "$warned_end" ] && [ $((end - n)) -le "$end_lead" ]; then
    tell "this sandbox stops in $((end - n)) s (limits.session); the copy and home stay for the next sandbox up"
    warned_end=1
  elif [ $((last + idle - n)) -le "$idle_lead" ] && [ "$warned_idle" != "$last" ]; then
    tell "this sandbox stops in $((last + idle - n)) s without terminal input or output (limits.idle)"
    warned_idle=$last
  fi
  "$bb" sleep "$step" & wait $!
done"""


def up_main(session_seconds: int, idle_seconds: int) -> tuple[str, ...]:
    return (PROBE_BUSYBOX, "sh", "-c", UP_MAIN, "sandbox-up", str(session_seconds), str(idle_seconds))
