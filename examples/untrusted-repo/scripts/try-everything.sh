#!/usr/bin/env bash
# Deliberately hostile "test helper" of an unreviewed repository: it tries to steal secrets, tamper
# with control files, reach the network, find a container runtime socket and gain privileges, and
# reports for each attempt whether the sandbox BLOCKED it or it ESCAPED.
# Exit 0 if nothing escaped, 1 otherwise. It cleans up everything it managed to create or append.
# Network rule: it never sends a packet off the machine. A connect or DNS lookup is attempted only
# when the routing table has no route to the destination (then the kernel fails it at once and
# nothing is sent); if a route exists, that alone is reported as ESCAPED and no connect is made.
# No `set -e`: every attempt is expected to fail. Run it only inside the sandbox (README.md).

cd "$(dirname -- "$0")/.." || { echo "cannot cd to the repository root" >&2; exit 2; }

MARK=".sandbox-escape-test.$$"
blocked=0
escaped=0
CLEANUP=()      # paths this script created (files and directories), removed in reverse order
# Errors are captured with $( ... 2>&1 ), never through a temp file: /tmp may be read-only too.

have() { command -v "$1" >/dev/null 2>&1; }
# timeout(1) if the image has it; without it, run the command as is (nothing here can hang long).
tmo() { local secs="$1"; shift; if have timeout; then timeout "$secs" "$@"; else "$@"; fi; }
one_line() { tr '\n\t' '  ' | sed -e 's/  */ /g' -e 's/^ //' -e 's/ $//'; }

# Last "reason" part of an error message: "bash: line 3: /etc/x: Read-only file system" -> "Read-only file system".
reason_of() {
    local msg
    msg="$(printf '%s' "$1" | tail -n 1)"
    msg="${msg##*: }"
    [ -n "$msg" ] || msg="failed"
    printf '%s' "$msg" | one_line
}

report_blocked() { blocked=$((blocked + 1)); printf 'BLOCKED  %s  (%s)\n' "$1" "$2"; }
report_escaped() { escaped=$((escaped + 1)); printf 'ESCAPED  %s  (%s)\n' "$1" "$2"; }

cleanup() {
    local i p
    for ((i = ${#CLEANUP[@]} - 1; i >= 0; i--)); do
        p="${CLEANUP[i]}"
        if [ -d "$p" ] && [ ! -L "$p" ]; then rmdir -- "$p" 2>/dev/null; else rm -f -- "$p" 2>/dev/null; fi
    done
    CLEANUP=()
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# mkdir -p that remembers which directories it created, so cleanup removes exactly those.
# On failure the reason is in $mkdir_err.
mkdir_tracked() {
    local d="$1" missing=()
    mkdir_err=""
    while [ ! -e "$d" ] && [ ! -L "$d" ] && [ "$d" != "/" ] && [ "$d" != "." ]; do
        missing=("$d" "${missing[@]}")
        d="$(dirname -- "$d")"
    done
    for d in "${missing[@]}"; do
        mkdir_err="$(mkdir -- "$d" 2>&1)" || return 1
        CLEANUP+=("$d")
    done
    return 0
}

# Try to create (or, if it exists, append to and then restore) a file; report the outcome.
try_write() {
    local what="$1" path="$2" size err
    if [ -f "$path" ]; then
        size="$(wc -c <"$path" 2>/dev/null)"
        if err="$( { printf '# %s\n' "$MARK" >>"$path"; } 2>&1 )"; then
            truncate -s "${size:-0}" -- "$path" 2>/dev/null
            report_escaped "$what" "appended to existing file (restored)"
        else
            report_blocked "$what" "$(reason_of "$err")"
        fi
        return
    fi
    if ! mkdir_tracked "$(dirname -- "$path")"; then
        report_blocked "$what" "$(reason_of "$mkdir_err")"
        cleanup
        return
    fi
    if err="$( { : >"$path"; } 2>&1 )"; then
        CLEANUP+=("$path")
        report_escaped "$what" "created $path (removed again)"
    else
        report_blocked "$what" "$(reason_of "$err")"
    fi
    cleanup
}

try_read() {
    local what="$1" path="$2" out
    if out="$( { wc -c <"$path"; } 2>&1 )"; then
        report_escaped "$what" "readable, $out bytes (content not shown)"
    else
        report_blocked "$what" "$(reason_of "$out")"
    fi
}

# Routing-table lookups (IPv4 main table; IPv6 any non-lo route counts as "routable").
route_iface_for() {
    local ip="$1" a b c d val iface dest _gw _fl _rc _use _met mask _rest
    IFS=. read -r a b c d <<<"$ip"
    val=$(( (d << 24) | (c << 16) | (b << 8) | a ))
    [ -r /proc/net/route ] || { echo "?"; return 0; }
    while read -r iface dest _gw _fl _rc _use _met mask _rest; do
        [ "$iface" = "Iface" ] && continue
        [ -n "$mask" ] || continue
        if (( (val & 16#$mask) == 16#$dest )); then echo "$iface"; return 0; fi
    done </proc/net/route
    return 1
}
has_ipv4_default_route() { awk '$2 == "00000000" && $8 == "00000000" {f = 1} END {exit !f}' /proc/net/route 2>/dev/null; }
ipv6_routes() { [ -r /proc/net/ipv6_route ] && awk '$NF != "lo" {print $NF}' /proc/net/ipv6_route | sort -u | one_line; }

echo "== try-everything: $(id 2>/dev/null | one_line) in $(pwd)"

# --- 1. secrets in the environment (names only, never values) -------------------------------
names=()
while read -r name; do
    up="${name^^}"
    case "$up" in
        *TOKEN* | *SECRET* | *KEY* | *PASSWORD* | *PASSWD* | *CREDENTIAL* | AWS_* | DOCKER_HOST | SSH_AUTH_SOCK)
            names+=("$name") ;;
    esac
done < <(compgen -e)
if [ "${#names[@]}" -gt 0 ]; then
    report_escaped "secret-shaped environment variables" "names: ${names[*]}"
else
    report_blocked "secret-shaped environment variables" "none of $(compgen -e | wc -l) variables looks like a secret"
fi

# --- 2. credential files ---------------------------------------------------------------------
try_read "read ~/.ssh/id_rsa" "${HOME:-/nonexistent}/.ssh/id_rsa"
try_read "read ~/.aws/credentials" "${HOME:-/nonexistent}/.aws/credentials"
if entries="$(ls -A /root/.ssh 2>&1)"; then
    report_escaped "list /root/.ssh" "$(printf '%s\n' "$entries" | grep -c .) entries visible"
else
    report_blocked "list /root/.ssh" "$(reason_of "$entries")"
fi

# --- 3. writes outside the workspace ---------------------------------------------------------
try_write "write a file into /etc" "/etc/$MARK"
try_write "write a file into /usr/bin" "/usr/bin/$MARK"
try_write "write a file into /" "/$MARK"
# $HOME itself is the agent's own writable home in the sandbox (policy `home:`, a tmpfs by default,
# gone with the sandbox): writing there is by design. What must still fail: /home around it, and
# another user's home.
try_write "write a file into /home (beside \$HOME)" "/home/$MARK"
try_write "write a file into another user's home" "/home/other-user/$MARK"

# --- 4. privileged control files inside the workspace ----------------------------------------
if awk -v ws="$PWD" '$5 == ws { split($0, s, " - "); split(s[2], f, " "); print f[1] }' /proc/self/mountinfo 2>/dev/null |
        grep -qx overlay; then
    # Copy mode: the workspace is the launcher's copy, so these writes succeed, in the copy only.
    # They are left there: `sandbox diff` marks them REFUSED and `sandbox apply` never carries them back.
    for path in .git/hooks/pre-commit .sandbox.yaml .github/workflows/evil.yml; do
        if mkdir -p -- "$(dirname -- "$path")" 2>/dev/null && printf '# %s\n' "$MARK" >>"$path" 2>/dev/null; then
            report_blocked "create $path" "copy mode: written to the copy only; sandbox apply refuses it"
        else
            report_blocked "create $path" "not writable"
        fi
    done
    report_blocked "append to .git/config" "copy mode: the host's .git is not mounted at all"
else
    # .git may not exist here: creating .git/hooks/pre-commit must still be impossible.
    try_write "create .git/hooks/pre-commit" ".git/hooks/pre-commit"
    try_write "append to .git/config" ".git/config"
    try_write "create .sandbox.yaml" ".sandbox.yaml"
    try_write "create .github/workflows/evil.yml" ".github/workflows/evil.yml"
fi

# --- 5. network ------------------------------------------------------------------------------
ifaces=""
for i in /sys/class/net/*; do
    [ -e "$i" ] && [ "${i##*/}" != "lo" ] && ifaces="$ifaces ${i##*/}"
done
ifaces="${ifaces# }"
if [ -n "$ifaces" ]; then
    report_escaped "network interfaces besides lo" "$ifaces"
else
    report_blocked "network interfaces besides lo" "only lo"
fi

# Inside the sandbox there is no interface but lo and no route at all, so the kernel fails these
# connects at once (ENETUNREACH) and nothing is sent anywhere. With a route present (a weaker
# container, or the host) we do not connect at all: the route alone counts as an escape.
for target in 1.1.1.1:443 10.0.0.1:80; do
    host="${target%:*}"; port="${target#*:}"
    if via="$(route_iface_for "$host")"; then
        report_escaped "TCP connect $target" "route via $via exists; connect not attempted so nothing leaves"
        continue
    fi
    # shellcheck disable=SC2016  # $1/$2 expand in the child bash, on purpose
    err="$(tmo 3 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$host" "$port" 2>&1)"
    rc=$?
    if [ "$rc" -eq 0 ]; then
        report_escaped "TCP connect $target" "connected"
    elif [ "$rc" -eq 124 ]; then
        report_escaped "TCP connect $target" "timed out: packets may have left"
    else
        report_blocked "TCP connect $target" "$(reason_of "$err")"
    fi
done

nameservers="$(awk '$1 == "nameserver" {print $2}' /etc/resolv.conf 2>/dev/null | one_line)"
dns_routable=""
for ns in $nameservers; do
    case "$ns" in
        *:*) [ -n "$(ipv6_routes)" ] && dns_routable="$ns (IPv6 routes: $(ipv6_routes))" ;;
        *) if via="$(route_iface_for "$ns")"; then dns_routable="$ns via $via"; fi ;;
    esac
done
if [ -z "$dns_routable" ] && has_ipv4_default_route; then dns_routable="default route"; fi
if [ -n "$dns_routable" ]; then
    report_escaped "DNS lookup example.com" "resolver reachable ($dns_routable); lookup not attempted so nothing leaves"
elif addr="$(tmo 3 getent hosts example.com 2>/dev/null)"; then
    report_escaped "DNS lookup example.com" "resolved: $(printf '%s' "$addr" | one_line)"
else
    report_blocked "DNS lookup example.com" "no answer (nameservers: ${nameservers:-none}, none routable)"
fi

# --- 6. container runtime sockets ------------------------------------------------------------
for sock in /var/run/docker.sock /run/docker.sock /run/containerd/containerd.sock; do
    if [ -e "$sock" ] || [ -S "$sock" ] || [ -L "$sock" ]; then
        report_escaped "runtime socket $sock" "present"
    else
        report_blocked "runtime socket $sock" "absent"
    fi
done
# Not -xdev: sockets on bind mounts (the workspace, /tmp, anything mounted) matter most.
socks="$(tmo 20 find / \( -path /proc -o -path /sys \) -prune -o -type s -print 2>/dev/null | head -n 5 | one_line)"
if [ -n "$socks" ]; then
    report_escaped "any socket file in the filesystem" "found: $socks"
else
    report_blocked "any socket file in the filesystem" "none found"
fi

# --- 7. become root --------------------------------------------------------------------------
if [ "$(id -u)" = "0" ]; then
    report_escaped "become root" "already uid 0"
elif ! have su; then
    report_blocked "su -c true root" "no su"
else
    if err="$(tmo 5 su -c true root </dev/null 2>&1)"; then
        report_escaped "su -c true root" "su succeeded"
    else
        report_blocked "su -c true root" "$(reason_of "$err")"
    fi
fi
nnp="$(awk '$1 == "NoNewPrivs:" {print $2}' /proc/self/status 2>/dev/null)"
suid="$(tmo 20 find / \( -path /proc -o -path /sys \) -prune -o -type f -perm /6000 -print 2>/dev/null | head -n 5 | one_line)"
if [ -z "$suid" ]; then
    report_blocked "find a setuid/setgid binary" "none found"
elif [ "$nnp" = "1" ]; then
    report_blocked "find a setuid/setgid binary" "found $suid but NoNewPrivs=1 ignores the bits"
else
    report_escaped "find a setuid/setgid binary" "found $suid, NoNewPrivs=${nnp:-?}"
fi

# --- 8. user namespace -----------------------------------------------------------------------
if have unshare; then
    if err="$(unshare -U -r true 2>&1)"; then
        report_escaped "unshare -U -r (user namespace)" "created a user namespace with root inside"
    else
        report_blocked "unshare -U -r (user namespace)" "$(reason_of "$err")"
    fi
elif have python3; then
    # CLONE_NEWUSER = 0x10000000
    if err="$(python3 -c 'import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000) != 0:
    sys.exit(os.strerror(ctypes.get_errno()))' 2>&1)"; then
        report_escaped "unshare(CLONE_NEWUSER) via python3" "created a user namespace"
    else
        report_blocked "unshare(CLONE_NEWUSER) via python3" "$(reason_of "$err")"
    fi
else
    report_blocked "unshare -U -r (user namespace)" "no unshare"
fi

# --- 9. process limit (read only: no fork bomb) ----------------------------------------------
pids_max=""
for f in /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/pids.max; do
    if [ -r "$f" ]; then pids_max="$(cat -- "$f" 2>/dev/null)"; pids_file="$f"; break; fi
done
if [ -z "$pids_max" ]; then
    report_escaped "pids limit" "no pids.max visible, limit unknown"
elif [ "$pids_max" = "max" ]; then
    report_escaped "pids limit" "$pids_file = max (unlimited)"
else
    report_blocked "pids limit" "$pids_file = $pids_max"
fi

# --- 10. kernel tunables -----------------------------------------------------------------------
if err="$( { : >>/proc/sys/kernel/hostname; } 2>&1 )"; then
    report_escaped "open /proc/sys/kernel/hostname for writing" "opened (nothing written)"
else
    report_blocked "open /proc/sys/kernel/hostname for writing" "$(reason_of "$err")"
fi

total=$((blocked + escaped))
printf 'RESULT  %d attempts: %d blocked, %d escaped\n' "$total" "$blocked" "$escaped"
[ "$escaped" -eq 0 ]
