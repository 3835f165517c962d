# Helpers of `sandbox selftest`'s in-sandbox script (bash, run as the agent user). Every case is a
# function that ends with exactly one verdict line: `ok` (the attempt was blocked), `escaped`
# (it succeeded), or `error` (it could not be run). Nothing is ever written to /proc or /sys: files
# there are only opened for appending, which writes nothing. Network rule: a connection is tried
# only to our own containers and the host's listener, or where the routing table has no route
# (the kernel fails it at once and nothing is sent).

ok() { printf 'VERDICT\tpass\t%s\n' "$(printf '%s' "$*" | one_line)"; }
escaped() { printf 'VERDICT\tFAIL\t%s\n' "$(printf '%s' "$*" | one_line)"; }
error() { printf 'VERDICT\tERROR\t%s\n' "$(printf '%s' "$*" | one_line)"; }
one_line() { tr '\n\t' '  ' | cut -c1-200; }
reason() { local m; m="$(printf '%s' "$1" | grep -v 'dmesg(1)' | tail -n 1)"; m="${m##*: }"; printf '%s' "${m:-failed}"; }
have() { command -v "$1" >/dev/null 2>&1; }

# try_create PATH: creating PATH (and missing parents) must fail; anything created is removed.
try_create() {
	local p="$1" err made=()
	local d; d="$(dirname -- "$p")"
	local parts=() q="$d"
	while [ ! -e "$q" ] && [ "$q" != / ] && [ "$q" != . ]; do parts=("$q" "${parts[@]}"); q="$(dirname -- "$q")"; done
	for q in "${parts[@]}"; do
		if ! err="$(mkdir -- "$q" 2>&1)"; then ok "mkdir $q: $(reason "$err")"; rmdir "${made[@]}" 2>/dev/null; return; fi
		made=("$q" "${made[@]}")
	done
	if err="$( { : >"$p"; } 2>&1 )"; then
		rm -f -- "$p"; rmdir "${made[@]}" 2>/dev/null
		escaped "created $p (removed again)"
	else
		rmdir "${made[@]}" 2>/dev/null
		ok "$(reason "$err")"
	fi
}

# try_open_w PATH: opening PATH for appending must fail (nothing is written either way).
try_open_w() {
	local err
	if [ ! -e "$1" ]; then ok "$1 absent"; return; fi
	if err="$( { : >>"$1"; } 2>&1 )"; then escaped "$1 opened for writing (nothing written)"; else ok "$(reason "$err")"; fi
}

try_read() {
	local out
	if [ ! -e "$1" ]; then ok "$1 absent"; return; fi
	if out="$( { wc -c <"$1"; } 2>&1 )"; then escaped "$1 readable ($out bytes, not shown)"; else ok "$(reason "$out")"; fi
}

# ipv4_route IP: prints the interface of a route to IP, fails when there is none.
ipv4_route() {
	local a b c d val iface dest _gw _fl _rc _use _met mask _rest
	IFS=. read -r a b c d <<<"$1"
	val=$(( (d << 24) | (c << 16) | (b << 8) | a ))
	while read -r iface dest _gw _fl _rc _use _met mask _rest; do
		[ "$iface" = Iface ] && continue
		[ -n "$mask" ] || continue
		if (( (val & 16#$mask) == 16#$dest )); then echo "$iface"; return 0; fi
	done </proc/net/route
	return 1
}
ipv6_routes() { awk '$NF != "lo" {print $NF}' /proc/net/ipv6_route 2>/dev/null | sort -u | tr '\n' ' '; }
default_gateway() {
	local iface dest gw _rest
	while read -r iface dest gw _rest; do
		if [ "$dest" = 00000000 ] && [ "$gw" != 00000000 ]; then
			printf '%d.%d.%d.%d\n' $((16#${gw:6:2})) $((16#${gw:4:2})) $((16#${gw:2:2})) $((16#${gw:0:2})); return 0
		fi
	done </proc/net/route
	return 1
}

# tcp_try IP PORT SECS: connected | refused | timeout | unreachable: REASON
tcp_try() {
	local err rc
	# shellcheck disable=SC2016  # expanded by the child bash
	err="$(timeout "$3" bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>&1)"; rc=$?
	case $rc:$err in
	0:*) echo connected ;;
	124:*) echo timeout ;;
	*refused*) echo refused ;;
	*) echo "unreachable: $(reason "$err")" ;;
	esac
}

# connect_unrouted NAME IP PORT: only where no route exists (nothing leaves); a route is a failure.
connect_unrouted() {
	local via r
	if via="$(ipv4_route "$2")"; then escaped "route to $2 via $via (not tried, so nothing left)"; return; fi
	r="$(tcp_try "$2" "$3" 3)"
	case $r in connected | refused | timeout) escaped "$2:$3 $r" ;; *) ok "$2:$3 $r" ;; esac
}

# host_reach PORT IP...: the host's listener must neither accept nor refuse (refused = reachable).
host_reach() {
	local port="$1" ip obs bad=0; shift
	obs="$(for ip in "$@"; do { echo "$ip:$(tcp_try "$ip" "$port" 2)"; } & done; wait)"
	case $obs in *:connected* | *:refused*) bad=1 ;; esac
	obs="$(printf '%s\n' "$obs" | sort | tr '\n' ' ')"
	if [ "$bad" = 1 ]; then escaped "$obs"; else ok "$obs"; fi
}

# via_proxy URL [CURL ARGS]: the HTTP status the proxy gives (000 when it refused a CONNECT).
via_proxy() {
	local url="$1"; shift
	curl -s -o /dev/null -w "${CURL_W:-%{http_code\}}" --max-time 10 -x "$HTTP_PROXY" --noproxy '' "$@" "$url"
}
# expect_control URL: an allowed URL must answer 200, or the denials beside it would prove nothing.
expect_control() {
	local code
	code="$(via_proxy "$1")"
	if [ "$code" = 200 ]; then ok "$1: 200"; else error "$1 answered $code: the denials would prove nothing"; fi
}
# expect_denied URL [CURL ARGS]: 403, or for CONNECT (-p) no tunnel; a plain request without an
# answer is a failure (the proxy may be trying to reach the address).
expect_denied() {
	local code w='%{http_code}'
	case " $* " in *" -p "*) w='%{http_connect}' ;; esac   # CONNECT: the proxy's own answer counts
	code="$(CURL_W="$w" via_proxy "$@")"
	case $code:$* in
	403:*) ok "403 from the proxy" ;;
	000:*\ -p*) ok "CONNECT refused by the proxy (no tunnel)" ;;
	000:*) escaped "no answer within 10 s: the proxy may be trying to reach it" ;;
	*) escaped "HTTP $code: went through" ;;
	esac
}

# expect_no_tunnel HOST:PORT: CONNECT, then plain HTTP inside the tunnel; the proxy may answer the
# CONNECT (even with 200, to show an error inside TLS), but no byte may come from the destination.
expect_no_tunnel() {
	local b
	b="$(curl -s --max-time 10 -x "$HTTP_PROXY" --noproxy '' -p "http://$1/" 2>&1)"
	case $b in upstream* | canary*) escaped "the tunnel reached: $(printf '%s' "$b" | head -c 80)" ;;
	*) ok "no answer from $1 through a tunnel" ;; esac
}

# cgroup files (v2 or v1)
cg_file() {
	if [ -e /sys/fs/cgroup/cgroup.controllers ]; then echo "/sys/fs/cgroup/$1"; else echo "/sys/fs/cgroup/$2"; fi
}

# try_protected PATH: a protected name (a read-only placeholder when missing) can be neither
# renamed away, written, nor created, nor can anything be created inside it.
try_protected() {
	local p="$1" err
	if err="$(mv -T -- "$p" "$p.selftest-moved" 2>&1)"; then mv -T -- "$p.selftest-moved" "$p"; escaped "renamed $p away (moved back)"; return; fi
	if [ -d "$p" ]; then try_create "$p/selftest.$$"; elif [ -e "$p" ]; then try_open_w "$p"; else try_create "$p"; fi
}

# plant PATH TEXT: an allowed write in a writable workspace, left for the after-run report.
plant() {
	local err
	if err="$( { mkdir -p -- "$(dirname -- "$1")" && printf '%s\n' "$2" >"$1"; } 2>&1 )"; then
		ok "planted ${1#"$WS"/} for the after-run report (see outside.surfaces_reported)"
	else
		error "not planted ($(reason "$err")): nothing to report"
	fi
}
