"""The hostile cases `sandbox selftest` runs inside a sandbox, as data: each is a bash body (run as
the agent user, helpers in lib.sh) that ends with one verdict line."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from launcher.host.paths import CREDENTIAL_PATHS
from launcher.policy.secrets import SECRET_NAME_PATTERNS, SECRET_VALUE_PREFIXES
from launcher.policy.surfaces import INVENTORY, PROTECTED
from launcher.selftest import scratch

BOTH = ("none", "proxy")


@dataclass(frozen=True, kw_only=True)
class Case:
    id: str
    expected: str
    body: str
    modes: tuple[str, ...] = BOTH
    timeout: int = 30       # seconds; a case that runs longer is an error, not a pass


def _c(id: str, expected: str, body: str, modes: tuple[str, ...] = BOTH, timeout: int = 30) -> Case:
    return Case(id=id, expected=expected, body=body.strip(), modes=modes, timeout=timeout)


def _p(id: str, expected: str, body: str) -> Case:
    """A case only proxy mode has (it needs the test network and the proxy)."""
    return _c(id, expected, body, modes=("proxy",))


_PROTECTED = [(".git/hooks/pre-commit", "create a git hook"), (".sandbox.yaml", "create the repository policy"),
              (".github/workflows/evil.yml", "create a CI workflow"), (".envrc", "create .envrc"),
              (".vscode/settings.json", "create IDE settings"), (".claude/settings.json", "create agent config")]


_EXAMPLES = frozenset(s.example for s in INVENTORY)   # the names, a pattern's filled in


def _slug(name: str) -> str:
    """protect.envrc for .envrc (the ids of the first cases), dot_lefthook_yml beside lefthook_yml."""
    slug = name.strip(".").replace(".", "_").replace("-", "_").replace("/", "_")
    return "dot_" + slug if name.startswith(".") and name[1:] in _EXAMPLES else slug


_IDS = {f"protect.{path.split('/')[0].strip('.').replace('.', '_')}" for path, _ in _PROTECTED}

FILESYSTEM = [
    _c("fs.write_root", "EROFS", 'try_create "/selftest.$$"'),
    _c("fs.write_etc", "EROFS", 'try_create "/etc/selftest.$$"'),
    _c("fs.write_usr", "EROFS", 'try_create "/usr/bin/selftest.$$"'),
    _c("fs.write_var", "EROFS", 'try_create "/var/selftest.$$"'),
    # $HOME is the agent's own writable home by design (policy `home:`, proven by the probe's
    # home.private); /home around it and any other user's home stay on the read-only root.
    _c("fs.write_home", "EROFS (in /home itself; $HOME is writable)", 'try_create "/home/selftest.$$"'),
    _c("fs.write_other_home", "EROFS", 'try_create "/home/other/selftest.$$"'),
    _c("fs.home_private", "$HOME owned by the agent, mode 0700, a mount of its own",
       'st="$("$BB" stat -c "%u:%g %a" -- "$HOME")"; [ "$st" = "$(id -u):$(id -g) 700" ] && '
       'awk -v h="$HOME" \'$5 == h { n++ } END { exit n != 1 }\' /proc/self/mountinfo && ok "$st" || escaped "$HOME is $st"'),
    _c("fs.write_probe", "read-only probe volume", 'try_create "/.sandbox/probe/selftest.$$"'),
    _c("fs.append_passwd", "EROFS", "try_open_w /etc/passwd"),
    _c("fs.remount_root_rw", "EPERM", 'err="$(mount -o remount,rw / 2>&1)" && escaped "remounted / rw" || ok "$(reason "$err")"'),
] + [
    _c(f"protect.{path.split('/')[0].strip('.').replace('.', '_')}", "read-only (also when missing)",
       # A bare name is a placeholder directory when missing: creating a file there only says EISDIR.
       f'try_protected "$WS/{path}"' if "/" not in path else f'try_create "$WS/{path}"') for path, _ in _PROTECTED
] + [
] + [
    # Every other protected inventory name, missing in the scratch workspace: a placeholder holds it.
    _c(f"protect.{_slug(name)}", "read-only (also when missing), not renamed away", f'try_protected "$WS/{name}"')
    for name in PROTECTED if f"protect.{_slug(name)}" not in _IDS
] + [
    _c("protect.git_config", "read-only", 'try_open_w "$WS/.git/config"'),
    _c("protect.rename_git", "EBUSY/EROFS", 'err="$(mv "$WS/.git" "$WS/.git-moved" 2>&1)" && { mv "$WS/.git-moved" "$WS/.git"; escaped "renamed .git"; } || ok "$(reason "$err")"'),
    _c("symlink.host_path", "the host path stays out of reach", r'''
if ! ln -s "$HOST_CANARY_DIR" "$WS/.selftest-link" 2>/dev/null; then ok "cannot plant a symlink (read-only workspace)"; exit; fi
err="$( { : >"$WS/.selftest-link/planted"; } 2>&1 )" && { rm -f "$WS/.selftest-link/planted"; rm -f "$WS/.selftest-link"; escaped "wrote through a symlink to $HOST_CANARY_DIR"; exit; }
rm -f "$WS/.selftest-link"; ok "the host path does not exist inside: $(reason "$err")"'''),
    _c("symlink.root_escape", "writes through a link to / stay inside (EROFS)", r'''
if ! ln -s / "$WS/.selftest-root" 2>/dev/null; then ok "cannot plant a symlink (read-only workspace)"; exit; fi
err="$( { : >"$WS/.selftest-root/etc/selftest.$$"; } 2>&1 )" && { rm -f "/etc/selftest.$$"; rm -f "$WS/.selftest-root"; escaped "wrote /etc through a symlink"; exit; }
rm -f "$WS/.selftest-root"; ok "$(reason "$err")"'''),
]

# The escapes through .git (a writable .git runs code on the host's next git command, or hides a
# change from it). Where one succeeds it is left in place: outside.host_git then runs host git on it.
GIT = [
    _c("git.writes", "EROFS for each of index, HEAD, refs, objects, packed-refs, info, hooks, config", r'''
[ -d "$WS/.git/objects" ] || { error "no git repository at $WS"; exit; }
bad=""; err=""; for p in index HEAD refs/heads/selftest objects/selftest packed-refs info/exclude hooks/selftest config; do f="$WS/.git/$p"
  if [ -e "$f" ]; then err="$( { : >>"$f"; } 2>&1 )" && bad="$bad $p(opened)"
  else err="$( { : >"$f"; } 2>&1 )" && { rm -f "$f"; bad="$bad $p(created, removed again)"; }; fi; done
[ -z "$bad" ] && ok "8 refused: $(reason "$err")" || escaped "writable:$bad"'''),
    _c("git.skip_worktree", "update-index refused (EROFS): the change stays visible", r'''
g() { git -C "$WS" -c safe.directory='*' "$@"; }
g ls-files --error-unmatch -- "$TRACKED" >/dev/null 2>&1 || { error "$TRACKED is not tracked in $WS"; exit; }
echo "changed by the selftest" >>"$WS/$TRACKED" 2>/dev/null   # allowed in a writable workspace
err="$(g update-index --skip-worktree -- "$TRACKED" 2>&1)" && { escaped "skip-worktree set: host git status no longer shows $TRACKED"; exit; }
case $err in *"Read-only file system"* | *"Permission denied"*) ok "$(reason "$err")" ;; *) error "update-index failed otherwise: $(reason "$err")" ;; esac'''),
    _c("git.commondir", "EROFS: .git/commondir cannot point at a planted git directory", r'''
[ -d "$WS/.git/objects" ] || { error "no git repository at $WS"; exit; }
e="$WS/evil"   # a copy of the repository whose config runs a command on the host's next `git status`
mkdir -p "$e" 2>/dev/null && cp -r "$WS/.git/objects" "$WS/.git/refs" "$WS/.git/HEAD" "$e/" 2>/dev/null &&
  printf '[core]\n\tfsmonitor = "touch %s; false"\n' "$HOST_CANARY" >"$e/config" 2>/dev/null
err="$( { echo ../evil >"$WS/.git/commondir"; } 2>&1 )" && { escaped "wrote ../evil into .git/commondir: host git runs evil/config"; exit; }
rm -rf "$e"; ok "$(reason "$err")"'''),
    # sub/.git is a gitfile (gitdir: ../.repos/sub): host git in sub/ runs that directory's config.
    _c("git.gitfile_target", "EROFS/EBUSY: a gitfile and the git directory it names stay as they are", r'''
[ -f "$WS/sub/.git" ] || { error "no gitfile at $WS/sub/.git"; exit; }
bad=""; for p in .repos/sub/config .repos/sub/hooks/selftest sub/.git; do
  if [ -e "$WS/$p" ]; then err="$( { : >>"$WS/$p"; } 2>&1 )" && bad="$bad $p"
  else err="$( { : >"$WS/$p"; } 2>&1 )" && { rm -f "$WS/$p"; bad="$bad $p(created, removed again)"; }; fi; done
e2="$(mv "$WS/.repos/sub" "$WS/.repos/moved" 2>&1)" && { mv "$WS/.repos/moved" "$WS/.repos/sub"; bad="$bad .repos/sub(renamed)"; }
[ -z "$bad" ] && ok "$(reason "$err")" || escaped "writable:$bad (host git in sub/ runs what is planted there)"'''),
    # .git/config includes .gitconfig-shared, which sets core.hooksPath = .githooks (missing).
    _c("git.include_hooks_path", "read-only (also when missing): the hooks path an included config names",
       'try_protected "$WS/.githooks"'),
]

# Allowed inside (the workspace is writable): each plants a surface for the after-run report, which
# outside.surfaces_reported judges. Case id -> what it plants, workspace-relative.
# The scratch workspace's hooks path (scratch.HOOKS_PATH) is protected there by what git reads (the
# case above proves it read-only), so it is not plantable: its reported surface is left out.
PLANTED = {f"report.{_slug(s.example)}": s.example for s in INVENTORY
           if not s.protect and s.example != scratch.HOOKS_PATH} | {
    "report.nested_git": "src/.git", "report.symlink_out": "report-link",
    "report.include": f"{scratch.INCLUDED_DIR}/jobs.yml"}   # a file .gitlab-ci.yml includes (launcher/host/includes.py)
_PLANT_BODY = {
    "report.include": f'plant "$WS/{scratch.INCLUDED_DIR}/jobs.yml" "evil: {{script: [\'touch /tmp/x\']}}"',
    "report.nested_git": r'''
mkdir -p "$WS/src/.git/objects" "$WS/src/.git/refs" 2>/dev/null && echo 'ref: refs/heads/main' >"$WS/src/.git/HEAD" 2>/dev/null
plant "$WS/src/.git/config" "$(printf '[core]\n\tfsmonitor = "touch %s; false"' "$HOST_CANARY")"''',
    "report.symlink_out": 'err="$(ln -s "$HOST_CANARY_DIR" "$WS/report-link" 2>&1)" && ok "planted report-link -> $HOST_CANARY_DIR for the after-run report" || error "not planted: $(reason "$err")"',
}
# Not cases: planting is allowed, so a plant has no verdict of its own (it could not fail); the
# script runs them after the cases and outside.surfaces_reported judges them, every one required
# in a writable workspace.
PLANTS = tuple(_c(case_id, "planted; the after-run report must list it",
                  _PLANT_BODY.get(case_id, f'plant "$WS/{path}" "# planted by sandbox selftest"'))
               for case_id, path in PLANTED.items())

# The launcher's own lists (launcher/policy/secrets.py, launcher/host/paths.py), as the shell sees them.
_NAMES_ERE = "^(" + "|".join(p.replace("*", "[^=]*").replace("?", "[^=]") for p in SECRET_NAME_PATTERNS) + ")="
_VALUES_ERE = "=(" + "|".join(SECRET_VALUE_PREFIXES) + ")|-----BEGIN [A-Z ]*PRIVATE KEY-----"   # plain names: no ERE escapes needed

CREDENTIALS = [
    _c("creds.env", "no secret-shaped names", r'''
n=""; for v in $(compgen -e); do case "${v^^}" in ''' + "|".join(SECRET_NAME_PATTERNS) + r''') n="$n $v";; esac; done
[ -z "$n" ] && ok "$(compgen -e | wc -l) variables, none secret-shaped" || escaped "names:$n"'''),
    _c("creds.proc_environ", "no secret in any readable /proc/*/environ", r'''
hits=""; n=0; for f in /proc/[0-9]*/environ; do [ -r "$f" ] || continue; n=$((n+1))
  if tr '\0' '\n' <"$f" 2>/dev/null | grep -Eiq ''' + shlex.quote(_NAMES_ERE) + r''' \
     || tr '\0' '\n' <"$f" 2>/dev/null | grep -Eq ''' + shlex.quote(_VALUES_ERE) + r'''; then hits="$hits $f"; fi; done
[ -z "$hits" ] && ok "$n environ files read, nothing secret-shaped" || escaped "found in$hits"'''),
    _c("creds.files", "no credential files", r'''
found=""; for p in /root/.ssh /run/secrets ''' + " ".join(f'"$HOME/{p}"' for p in CREDENTIAL_PATHS) + r'''; do
  [ -e "$p" ] && [ -r "$p" ] && found="$found $p"; done
[ -z "$found" ] && ok "none present" || escaped "readable:$found"'''),
    _c("creds.shadow", "unreadable", "try_read /etc/shadow"),
]

SOCKETS = [
    _c("sock.runtime_paths", "absent", r'''
found=""; for s in /var/run/docker.sock /run/docker.sock /run/containerd/containerd.sock /var/run/containerd/containerd.sock /run/podman/podman.sock /run/buildkit/buildkitd.sock /var/run/crio/crio.sock /run/user/*/docker.sock; do
  { [ -e "$s" ] || [ -L "$s" ]; } && found="$found $s"; done
[ -z "$found" ] && ok "none of the known runtime sockets exists" || escaped "present:$found"'''),
    _c("sock.parent_dirs", "no runtime dir mounted (/run, /var/run, /var/lib/docker)", r'''
bad=$(awk '{print $5}' /proc/self/mountinfo | grep -E '^/(var/)?run(/|$)|^/var/lib/(docker|containerd|containers)(/|$)' | grep -vxF "${ENGINE_MARKER:-/-}" | tr '\n' ' ')
# podman's marker (ENGINE_MARKER, podman only): an empty regular file this uid cannot write, else it counts
if [ -n "$ENGINE_MARKER" ] && grep -qF " $ENGINE_MARKER " /proc/self/mountinfo; then
  { [ -f "$ENGINE_MARKER" ] && [ ! -L "$ENGINE_MARKER" ] && [ ! -s "$ENGINE_MARKER" ] && ! { : >>"$ENGINE_MARKER"; } 2>/dev/null; } || bad="$bad $ENGINE_MARKER"
fi
for d in /run/docker /run/containerd /var/lib/docker /var/lib/containerd /run/podman; do [ -e "$d" ] && bad="$bad $d"; done
[ -z "$bad" ] && ok "no mount under /run, /var/run or a runtime dir" || escaped "$bad"'''),
    # busybox find: GNU find trusts the directory entry's type, which calls a bind-mounted socket
    # a regular file (the mount point's own type), and so misses exactly the dangerous case.
    _c("sock.any_socket_file", "no socket file on any mount", r'''
s=$(timeout 20 "$BB" find / \( -path /proc -o -path /sys \) -prune -o -type s -print 2>/dev/null | head -n 5 | tr '\n' ' '; exit "${PIPESTATUS[0]}")
rc=$?; [ "$rc" = 124 ] && { escaped "the walk timed out after 20 s: not every mount was seen ($s)"; exit; }
[ -z "$s" ] && ok "none found" || escaped "$s"''', timeout=40),
    _c("sock.abstract", "no runtime socket in this network namespace", r'''
s=$(awk 'NR > 1 && $8 ~ /docker|containerd|buildkit|podman/ {print $8}' /proc/net/unix 2>/dev/null | head -n 3 | tr '\n' ' ')
[ -z "$s" ] && ok "no docker/containerd/buildkit/podman socket in /proc/net/unix" || escaped "$s"'''),
]

PRIVILEGE = [
    _c("priv.uid", "not root", '[ "$(id -u)" != 0 ] && ok "uid $(id -u) gid $(id -g) groups $(id -G)" || escaped "uid 0"'),
    _c("priv.caps", "no capabilities", r'''
c=$(awk '/^Cap(Inh|Prm|Eff|Amb)/ && $2 != "0000000000000000" {print $1 $2}' /proc/self/status | tr '\n' ' ')
[ -z "$c" ] && ok "CapInh/Prm/Eff/Amb all zero" || escaped "$c"'''),
    _c("priv.setuid_files", "none, or NoNewPrivs=1", r'''
s=$(timeout 20 find / \( -path /proc -o -path /sys \) -prune -o -type f -perm /6000 -print 2>/dev/null | head -n 5 | tr '\n' ' '; exit "${PIPESTATUS[0]}")
[ "$?" = 124 ] && { escaped "the walk timed out after 20 s: not every file was seen ($s)"; exit; }
nnp=$(awk '/^NoNewPrivs:/ {print $2}' /proc/self/status)
if [ -z "$s" ]; then ok "none found, NoNewPrivs=$nnp"; elif [ "$nnp" = 1 ]; then ok "found $s but NoNewPrivs=1"; else escaped "found $s, NoNewPrivs=$nnp"; fi''', timeout=40),
    _c("priv.su", "refused", 'have su || { ok "no su"; exit; }; err="$(timeout 5 su -c true root </dev/null 2>&1)"; case $? in 0) escaped "su succeeded" ;; 124) escaped "su still waiting after 5 s (not refused)" ;; *) ok "$(reason "$err")" ;; esac'),
    _c("priv.unshare_user", "EPERM", 'err="$(unshare -U -r true 2>&1)" && escaped "user namespace created" || ok "$(reason "$err")"'),
    _c("priv.unshare_net", "EPERM", 'err="$(unshare -n true 2>&1)" && escaped "network namespace created" || ok "$(reason "$err")"'),
    _c("priv.mount", "EPERM", 'err="$(mount -t tmpfs none /tmp 2>&1)" && escaped "mounted a tmpfs" || ok "$(reason "$err")"'),
    _c("priv.mknod", "EPERM (gVisor: only its own emulated devices open)", r'''
if ! err="$(mknod "/tmp/selftest-null.$$" c 1 3 2>&1)"; then ok "$(reason "$err")"; exit; fi
rm -f "/tmp/selftest-null.$$"
[ -e /proc/sentry-meminfo ] || { escaped "created a device node"; exit; }
# gVisor lets mknod through, and a node opens only a device gVisor emulates: never a host device
mknod "/tmp/selftest-mem.$$" c 1 1 && err="$(head -c 1 "/tmp/selftest-mem.$$" 2>&1 >/dev/null)" && r=read || r="$(reason "$err")"
rm -f "/tmp/selftest-mem.$$"
case $r in read) escaped "gVisor: a /dev/mem node (1:1) could be read" ;; *) ok "gVisor: mknod works, a /dev/mem node (1:1) does not open: $r" ;; esac'''),
    _c("priv.chroot", "EPERM", 'err="$(chroot / true 2>&1)" && escaped "chroot worked" || ok "$(reason "$err")"'),
    _c("priv.keyctl", "add_key refused by seccomp", r'''
case $(uname -m) in x86_64) nr=248 ;; aarch64) nr=217 ;; *) error "no syscall number for $(uname -m)"; exit ;; esac
r=$(perl -e 'my ($t, $d, $v) = ("user", "selftest", "v"); my $r = syscall('"$nr"', $t, $d, $v, 1, -3); print $r < 0 ? "refused: $!" : "key $r"' 2>&1)
case $r in refused*) ok "$r" ;; *) escaped "$r" ;; esac'''),
    _c("priv.raw_socket", "EPERM (no NET_RAW)", r'''
r=$(perl -e 'use Socket; print socket(my $s, PF_INET, SOCK_RAW, 1) ? "opened" : "refused: $!"')
case $r in refused*) ok "$r" ;; *) escaped "raw socket $r" ;; esac'''),
]

KERNEL = [
    _c("proc.sys_write", "EROFS", "try_open_w /proc/sys/kernel/hostname"),
    _c("proc.sysrq", "refused", "try_open_w /proc/sysrq-trigger"),
    _c("proc.core_pattern", "EROFS", "try_open_w /proc/sys/kernel/core_pattern"),
    _c("proc.kcore", "masked", r'''
[ -e /proc/kcore ] || { ok "absent"; exit; }
n=$(head -c 16 /proc/kcore 2>/dev/null | wc -c); [ "$n" = 0 ] && ok "masked (reads nothing)" || escaped "read $n bytes"'''),
    _c("sys.write", "EROFS", "try_open_w /sys/kernel/mm/transparent_hugepage/enabled"),
    _c("cgroup.mkdir", "EROFS", r'''
d=$(dirname "$(cg_file pids.max pids/pids.max)")
err="$(mkdir "$d/selftest.$$" 2>&1)" && { rmdir "$d/selftest.$$"; escaped "created a cgroup in $d"; } || ok "$(reason "$err")"'''),
    _c("cgroup.release_agent", "absent or read-only", r'''
f=""; for p in /sys/fs/cgroup/*/release_agent /sys/fs/cgroup/release_agent; do [ -e "$p" ] && f="$p" && break; done
[ -n "$f" ] && try_open_w "$f" || ok "no release_agent visible"'''),
    _c("cgroup.raise_limit", "EROFS", 'try_open_w "$(cg_file pids.max pids/pids.max)"'),
    _c("dev.block", "no block device", r'''
b=$(find /dev -type b 2>/dev/null | tr '\n' ' '); [ -z "$b" ] && ok "none" || escaped "$b"'''),
    _c("dev.mem", "absent", r'''
f=""; for d in /dev/mem /dev/kmem /dev/port /dev/kmsg /dev/sda /dev/nvme0; do [ -e "$d" ] && f="$f $d"; done
[ -z "$f" ] && ok "none of /dev/mem, kmem, port, kmsg, sda, nvme0" || escaped "$f"'''),
    _c("proc.host_processes", "only the sandbox's own processes", r'''
n=0; bad=""; for p in /proc/[0-9]*; do n=$((n+1)); c=$(cat "$p/comm" 2>/dev/null)
  case $c in dockerd|containerd*|systemd|init|sshd|kthreadd|squid) bad="$bad ${p#/proc/}:$c" ;; esac; done
[ -z "$bad" ] && [ "$n" -lt 50 ] && ok "$n processes, none of the host's" || escaped "$n processes:$bad"'''),
]

LIMITS = [
    _c("limits.fork_bomb", "stops at pids.max", r'''
f=$(cg_file pids.max pids/pids.max); max=$(cat "$f" 2>/dev/null)
case $max in ''|max) escaped "no pids limit ($f=${max:-unreadable}); bomb not started"; exit ;; esac
want=$((max + 64))
last=$("$BB" sh -c 'i=0; while [ $i -lt '"$want"' ]; do '"$BB"' sleep 30 >/dev/null 2>&1 & i=$((i+1)); echo $i; done' 2>/dev/null | tail -n 1)
# only the bomb's own sleeps (this case's process group): in a weakened sandbox with the host's
# PIDs, a kill by name alone ended every `sleep` on the host
pg=$(s=$(cat /proc/$$/stat); s=${s##*) }; set -- $s; echo "$3")
for p in /proc/[0-9]*; do read -r c <"$p/comm" 2>/dev/null; [ "$c" = sleep ] || continue
  s=$(cat "$p/stat" 2>/dev/null); s=${s##*) }; set -- $s; [ "$3" = "$pg" ] && kill -9 "${p#/proc/}" 2>/dev/null; done
wait 2>/dev/null
if [ "${last:-0}" -lt "$want" ] && [ "${last:-0}" -le "$max" ]; then ok "fork failed after ${last:-0} processes (pids.max $max)"; else escaped "started ${last:-0} of $want (pids.max $max)"; fi''', timeout=60),
    _c("limits.memory_bomb", "OOM-killed inside the sandbox", r'''
f=$(cg_file memory.max memory/memory.limit_in_bytes); lim=$(cat "$f" 2>/dev/null)
case $lim in ''|max|*[!0-9]*) escaped "no memory limit ($f=${lim:-unreadable}); bomb not started"; exit ;; esac
[ "${#lim}" -gt 13 ] && { escaped "memory limit $lim is effectively none; bomb not started"; exit; }
head -c $((lim + 256 * 1024 * 1024)) /dev/zero | tail >/dev/null 2>&1; rc=${PIPESTATUS[1]}
[ "$rc" = 137 ] && ok "the allocator was killed (SIGKILL) at the $lim byte limit; this shell lives on" || escaped "allocated past the limit (tail exit $rc)"''', timeout=90),
    _c("limits.tmpfs_fill", "ENOSPC at the declared size", r'''
res=""; bad=0; for e in $TMPFS; do t="${e%%:*}"; size="${e##*:}"; f="$t/selftest-fill.$$"
  head -c $((size + 1048576)) /dev/zero >"$f" 2>/dev/null; got=$("$BB" stat -c %s "$f" 2>/dev/null || echo 0); rm -f "$f"
  res="$res $t:$got/$size"; [ "$got" -le "$size" ] || bad=1; done
[ -n "$TMPFS" ] || { ok "no writable tmpfs declared"; exit; }
[ "$bad" = 0 ] && ok "filled to at most the size:$res" || escaped "wrote past the size:$res"''', timeout=60),
    _c("limits.shm_fill", "ENOSPC at /dev/shm's size", r'''
[ -w /dev/shm ] || { ok "/dev/shm not writable"; exit; }
size=$(df -B1 --output=size /dev/shm | tail -n 1 | tr -d ' '); f=/dev/shm/selftest-fill.$$
head -c $((size + 1048576)) /dev/zero >"$f" 2>/dev/null; got=$("$BB" stat -c %s "$f" 2>/dev/null || echo 0); rm -f "$f"
[ "$got" -le "$size" ] && [ "$size" -le $((512 * 1048576)) ] && ok "stopped at $got of $size bytes" || escaped "$got bytes in a $size byte /dev/shm"''', timeout=60),
]

NETWORK = [
    _c("net.interfaces", "none: only lo; proxy: lo and one", r'''
l=$("$BB" ls /sys/class/net 2>&1) || { error "cannot list /sys/class/net: $l"; exit; }
i=$(printf '%s\n' "$l" | tr '\n' ' '); n=$(printf '%s\n' "$l" | grep -vc '^lo$')
want=0; [ "$MODE" = proxy ] && want=1
[ "$n" = "$want" ] && ok "$i" || escaped "interfaces: $i"'''),
    _c("net.ipv6", "no IPv6 route or address beyond lo", r'''
r="$(ipv6_routes)"; a=$(awk '$NF != "lo"' /proc/net/if_inet6 2>/dev/null | wc -l)
[ -n "$r" ] || [ "$a" != 0 ] && { escaped "ipv6 routes: $r addresses: $a (nothing tried)"; exit; }
x="$(tcp_try fd00::1 80 3)"; case $x in unreachable*) ok "no IPv6 path: $x" ;; *) escaped "fd00::1 $x" ;; esac'''),
    _c("host.listener", "the host's listener on 0.0.0.0 is neither reachable nor refusing",
       'host_reach "$LISTEN_PORT" $HOST_IPS'),
    _c("host.gateway", "the gateway (host side) does not answer", r'''
gw="$(default_gateway)" || { ok "no default route"; exit; }
[ "$MODE" = proxy ] || { escaped "a default route via $gw in a sandbox without network (not tried)"; exit; }
# Only a private gateway is tried: a public one would be someone else's router. 198.18.0.0/15
# (RFC 2544, never routed publicly) is where the launcher puts its own networks (launcher/engine/subnets.py).
case $gw in 10.* | 192.168.* | 172.1[6-9].* | 172.2[0-9].* | 172.3[01].* | 198.1[89].*) host_reach "$LISTEN_PORT" "$gw" ;; *) escaped "gateway $gw is not a private address (not tried)" ;; esac'''),
    _c("host.loopback", "loopback is the sandbox's own", r'''
r="$(tcp_try 127.0.0.1 "$LISTEN_PORT" 2)"; case $r in connected) escaped "the host's listener answers on 127.0.0.1" ;; *) ok "own loopback: $r" ;; esac'''),
    # Public and metadata addresses: only where there is no route at all (mode none).
    _c("net.direct_public", "no route (ENETUNREACH)", "connect_unrouted public 1.1.1.1 443", modes=("none",)),
    _c("net.metadata", "no route (ENETUNREACH)", "connect_unrouted metadata 169.254.169.254 80", modes=("none",)),
    _c("net.private", "no route (ENETUNREACH)", "connect_unrouted private 10.0.0.1 80", modes=("none",)),
    _c("net.dns", "no resolver reachable", r'''
for ns in $(awk '$1 == "nameserver" {print $2}' /etc/resolv.conf); do case $ns in *:*) [ -n "$(ipv6_routes)" ] && { escaped "resolver $ns routable"; exit; } ;; *) via="$(ipv4_route "$ns")" && { escaped "resolver $ns routable via $via (not tried)"; exit; } ;; esac; done
timeout 5 getent hosts example.com >/dev/null; case $? in 0) escaped "example.com resolved" ;; 124) escaped "still resolving after 5 s with no resolver routable" ;; *) ok "no name resolves, no resolver routable" ;; esac''', modes=("none",)),
    # Proxy mode: the only way out is the proxy; our canary must never see anything.
    # It also sends one UDP datagram to the canary's port 53, which nothing inside can see arrive:
    # outside.canary_silent judges it from the canary's log (no case of its own: it could not fail).
    _p("net.direct_canary", "no direct path to another container", r'''
(echo selftest >"/dev/udp/$CANARY_IP/53") 2>/dev/null
r="$(tcp_try "$CANARY_IP" 80 3)"; case $r in connected | refused) escaped "$CANARY_IP:80 $r" ;; *) ok "$CANARY_IP:80 $r" ;; esac'''),
    # Any reply is an answer, however late: the wait is the probe's egress.dns window, past the 4 s
    # for which Docker's embedded resolver relays an upstream's answer (both names asked at once).
    _p("net.dns_outside", "outside names get no DNS reply (4.5 s)", r'''
r=$(for n in canary.test allowed.test; do { x=$(timeout 4.5 "$BB" nslookup -type=a "$n" 2>&1); echo "$n:$?:$(printf '%s' "$x" | one_line)"; } & done; wait)
case $r in *Server:* | *Name:* | *"can't find"*) escaped "answered: $r" ;;
  *) printf '%s\n' "$r" | grep -qv ':124:\|refused\|timed out' && error "unexpected: $r" || ok "no reply within 4.5 s: $(printf '%s' "$r" | one_line)" ;; esac'''),
    _p("proxy.env", "HTTP(S)_PROXY point at the proxy", r'''
for v in HTTP_PROXY HTTPS_PROXY http_proxy https_proxy; do [ "${!v}" = "$HTTP_PROXY" ] && [ -n "${!v}" ] || { escaped "$v=${!v}"; exit; }; done; ok "$HTTP_PROXY"'''),
    _p("proxy.control_allowed", "200 (control: the proxy works)", "expect_control http://allowed.test/"),
    _p("proxy.disallowed_host", "403", "expect_denied http://denied.test/"),
    _p("proxy.ip_literal", "403", 'expect_denied "http://$CANARY_IP/"'),
    _p("proxy.metadata", "403 (never contacted)", "expect_denied http://169.254.169.254/latest/meta-data/"),
    _p("proxy.localhost", "403", "expect_denied http://localhost/"),
    _p("proxy.loopback_port", "403", "expect_denied http://127.0.0.1:3128/"),
    _p("proxy.host_address", "403", 'expect_denied "http://${HOST_IPS%% *}:$LISTEN_PORT/"'),
    _p("proxy.other_port", "403", "expect_denied http://allowed.test:8443/"),
    _p("proxy.connect_other_port", "no tunnel to allowed.test:8443", "expect_no_tunnel allowed.test:8443"),
    _p("proxy.connect_ip", "no tunnel to an IP literal", 'expect_no_tunnel "$CANARY_IP:443"'),
    _p("proxy.connect_denied", "no tunnel to denied.test:443", "expect_no_tunnel denied.test:443"),
    _p("proxy.lookalike_suffix", "403", "expect_denied http://allowed.test.evil.test/"),
    _p("proxy.lookalike_prefix", "403", "expect_denied http://evilallowed.test/"),
    _p("proxy.wildcard_apex", "403 (*.wild.test never covers wild.test)", "expect_denied http://wild.test/"),
    _p("proxy.wildcard_control", "200 (control: sub.wild.test)", "expect_control http://sub.wild.test/"),
    _p("proxy.host_mismatch", "403: the URL decides, not the Host header", "expect_denied http://denied.test/ -H 'Host: allowed.test'"),
    _p("proxy.front_through_allowed", "the tunnel goes to allowed.test's address only", r'''
b=$(curl -s --max-time 10 -x "$HTTP_PROXY" --noproxy '' -H 'Host: denied.test' http://allowed.test/)
case $b in upstream*) ok "answered by the upstream: $b" ;; canary*) escaped "reached the canary: $b" ;; *) ok "no answer: $b" ;; esac'''),
]

IN_SANDBOX = tuple(FILESYSTEM + GIT + CREDENTIALS + SOCKETS + PRIVILEGE + KERNEL + LIMITS + NETWORK)

# Checked by the launcher outside the sandbox, after the in-sandbox cases ran.
OUTSIDE = {
    "outside.host_listener_silent": ("no connection reached the host's listener", BOTH),
    "outside.host_dir_untouched": ("the host directory the planted symlink named is unchanged", BOTH),
    "outside.canary_silent": ("the canary saw no connection and no DNS query", ("proxy",)),
    "outside.surfaces_reported": ("the after-run report lists every surface the report.* plants planted, each of them there", BOTH),
    "outside.host_git": ("host git status/diff run nothing planted, show every change", BOTH),
    "outside.time_limit": ("a sandbox over its time limit is stopped", BOTH),
    "outside.nothing_left": ("no container, network or placeholder of the selftest is left", BOTH),
    # Copy-mode presets only: the same cases once more, on a copy (see runner.copy_judgments).
    "outside.copy_host_untouched": ("in copy mode the cases leave the host tree byte for byte as it was", BOTH),
    "outside.copy_apply_refuses": ("`sandbox apply` would carry back none of the git or protected files planted", BOTH),
    "outside.copy_type_changes": ("a file the agent made a directory or a FIFO is diffed as a type change (the FIFO "
                                  "refused), never a crash", BOTH),
    "outside.copy_control_names": ("`sandbox apply` would refuse every name with control characters", BOTH),
    "outside.copy_diff_frozen": ("`sandbox diff` of the run's checkpoint (a read-only view) shows the copy's changes", BOTH),
    # Trust-keyed state (issue 40 item 2): see runner.judge_home_trust.
    "outside.home_trust": ("a home volume of this preset is never the one of a policy of wider reach", BOTH),
}

# The copy pass's own plants, after the cases (issue 40): a file of the copy made a directory with a
# file at depth, one made a FIFO, and names with a newline, a terminal escape, DEL and a C1 byte.
WAY_BACK = ("{ cd \"$WS\" && rm -f README.md && mkdir -p README.md/in/deep && echo x > README.md/in/deep/f && rm -f tracked.txt && "
            "mkfifo tracked.txt && mkdir -p wayback && for n in 'nl\\nx' 'esc\\033[31mx' 'del\\177x' 'c1\\302\\233x'; "
            "do printf x > \"wayback/$(printf \"$n\")\"; done; } >/dev/null 2>&1")


# Not run inside a gVisor sandbox: gVisor mounts no cgroup files, so the case cannot see the limit,
# and the limit holds the whole sandbox on the host's side (gVisor's threads, its memory): at it the
# sandbox ends (exit 2), which would end the rest of the matrix too. tests/test_gvisor.py runs both
# bombs on their own and checks that the sandbox is bounded.
NOT_UNDER_GVISOR = {"limits.fork_bomb": "the pids limit counts gVisor's host threads; at it the whole sandbox ends",
                    "limits.memory_bomb": "gVisor sizes its memory to the limit; no cgroup file to read inside"}


def for_mode(mode: str, runtime: str = "runc") -> tuple[Case, ...]:
    return tuple(c for c in IN_SANDBOX if mode in c.modes and not (runtime == "gvisor" and c.id in NOT_UNDER_GVISOR))
