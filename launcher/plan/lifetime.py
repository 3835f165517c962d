"""How long a long-lived sandbox (`up`, a dev container) lives: its main process."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.errors import PolicyError, Problem
from launcher.plan.plan import PROBE_BUSYBOX
from launcher.policy.layers import Effective, LayerKind, get
from launcher.values import show

# Where `sandbox extend` leaves a new end (epoch seconds) for the main process below: /dev is the
# engine's tmpfs, owned by root and mode 755 (runc, gVisor, podman), so only a root exec (`docker
# exec -u 0`, as extend runs) writes there, never the agent's user; and the loop still clamps
# whatever it reads to the ceiling in its own argv (start + CEILING), so a forged file cannot
# pass the ceiling either.
END_FILE = "/dev/.sandbox-session-end"

# The main process of a long-lived sandbox (`up`, a dev container). It ends the container when
# limits.session is up, whoever is attached, or when none of the sandbox's terminals had input or
# output for limits.idle (a pty's access and modification times, which the kernel keeps to 8 s):
# work without a terminal does not count. Before either end (5 minutes, half of a short limit)
# it writes a notice to every terminal; what that notice writes is not counted as activity. Only
# the probe's busybox runs, and SIGTERM (`sandbox down`) ends it at once. `sandbox extend` moves
# the end (END_FILE, read at every step, never past start + CEILING, $3); the notice follows it.
UP_MAIN = f"""trap 'exit 143' TERM
max=$1 idle=$2 ceiling=${{3:-$1}} bb={PROBE_BUSYBOX}
now() {{ "$bb" date +%s; }}
lead() {{ if [ $(($1 / 2)) -lt 300 ]; then echo $(($1 / 2)); else echo 300; fi; }}
tell() {{
  for t in /dev/pts/[0-9]*; do echo "sandbox: $1" >"$t"; done 2>/dev/null
  quiet=$(($(now) + 9))
}}
start=$(now) quiet=0 warned_end= warned_idle=
end=$((start + max)) latest=$((start + ceiling)) last=$start end_lead=$(lead "$max") idle_lead=$(lead "$idle")
step=$(( (end_lead < idle_lead ? end_lead : idle_lead) / 4 + 1 ))
[ "$step" -le 15 ] || step=15
while :; do
  for t in /dev/pts/[0-9]*; do
    times=$("$bb" stat -c '%X %Y' "$t" 2>/dev/null) || continue
    input=${{times% *}} output=${{times#* }}
    [ "$input" -le "$last" ] || last=$input
    [ "$output" -le "$quiet" ] || [ "$output" -le "$last" ] || last=$output
  done
  asked=
  read -r asked 2>/dev/null <{END_FILE}
  case $asked in *[!0-9]*|"") ;; *)
    if [ ${{#asked}} -le 11 ] && [ "$asked" -gt "$end" ]; then
      [ "$asked" -le "$latest" ] || asked=$latest
      [ "$asked" -le "$end" ] || {{ end=$asked; warned_end=; }}
    fi;;
  esac
  n=$(now)
  if [ "$n" -ge "$end" ]; then echo "sandbox: the session ended: limits.session ($((end - start)) s)"; exit 0; fi
  if [ $((n - last)) -ge "$idle" ]; then echo "sandbox: the session ended: no terminal input or output for $idle s (limits.idle)"; exit 0; fi
  if [ -z "$warned_end" ] && [ $((end - n)) -le "$end_lead" ]; then
    tell "this sandbox stops in $((end - n)) s (limits.session); \\`sandbox extend\\` on the host adds time; the copy and home stay for the next sandbox up"
    warned_end=1
  elif [ $((last + idle - n)) -le "$idle_lead" ] && [ "$warned_idle" != "$last" ]; then
    tell "this sandbox stops in $((last + idle - n)) s without terminal input or output (limits.idle)"
    warned_idle=$last
  fi
  "$bb" sleep "$step" & wait $!
done"""


# `sandbox extend`'s root exec: the new end in END_FILE, whole (a rename), readable by the loop.
WRITE_END = f"""umask 022
echo "$1" >{END_FILE}.new && {PROBE_BUSYBOX} mv -f {END_FILE}.new {END_FILE}"""


def up_main(session_seconds: int, idle_seconds: int, ceiling_seconds: int | None = None) -> tuple[str, ...]:
    ceiling = max(session_seconds, ceiling_seconds or session_seconds)
    return (PROBE_BUSYBOX, "sh", "-c", UP_MAIN, "sandbox-up", str(session_seconds), str(idle_seconds), str(ceiling))


def write_end(end: int) -> list[str]:
    """The root exec that tells a running session its new end (epoch seconds)."""
    return [PROBE_BUSYBOX, "sh", "-c", WRITE_END, "sandbox-extend", str(end)]


@dataclass(frozen=True, kw_only=True)
class Ceiling:
    """How long a session may last at most, whatever `--timeout` shortened it to: limits.session as
    the layers before the command line allow it, and the layer (or schema default) that decided."""
    seconds: int
    source: str

    def label(self) -> str:
        return f"{self.seconds} {self.source}"

    @classmethod
    def of_label(cls, text: str) -> "Ceiling | None":
        seconds, _, source = text.partition(" ")
        return cls(seconds=int(seconds), source=source or "?") if seconds.isdigit() else None


def ceiling(eff: Effective) -> Ceiling:
    """limits.session after every layer but the command line's (`--timeout` only shortens this
    session: `sandbox extend` may go back up to the ceiling), and who decided it."""
    field = "limits.session"
    kept = [i for i, layer in enumerate(eff.layers) if layer.kind is not LayerKind.FLAGS] or [0]
    steps = eff.steps[:kept[-1] + 1]
    value = get(steps[-1], field)
    first = next(i for i, step in enumerate(steps) if get(step, field) == value)
    layer = eff.layers[min(first, len(eff.layers) - 1)]
    source = f"the schema's default, under {layer.label}" if field in layer.defaulted else layer.label
    return Ceiling(seconds=value, source=source)


def extended_end(*, now: int, end: int, start: int, add: int, limit: Ceiling, name: str = "the sandbox") -> int:
    """The session's new end: `add` seconds after its current end (or now, if that passed), refused
    (PolicyError, exit 120) past start + the ceiling."""
    new = max(now, end) + add
    latest = start + limit.seconds
    if new > latest:
        room = max(0, latest - max(now, end))
        room = room - room % 60 if room >= 60 else room   # whole minutes, as people ask
        raise PolicyError([Problem(
            file=limit.source, path="limits.session",
            expected=f"an end within its ceiling, {show('limits.session', limit.seconds)} after {name} started "
                     f"(by {_clock(latest)} at the latest)",
            found=f"{show('limits.session', add)} more, ending {_clock(new)}",
            hint=(f"extend by {show('limits.session', room)} at most" if room else "it runs until its ceiling already")
                 + f"; {limit.source} sets the ceiling (--timeout only shortens a session)")])
    return new


def _clock(epoch: int) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(epoch))
