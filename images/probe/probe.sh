# probe.sh: proves the sandbox inside the agent's own container, then execs the agent.
# POSIX sh for busybox ash; interface in CONTRACT.md. Run as:
#   /.sandbox/probe/busybox sh /.sandbox/probe/probe.sh key=value... -- agent argv...
#
# Phases, in the order of this file:
#   1. library    _p_* helpers: the result line, escaping, comma lists, write tests
#   2. arguments  parse_args: the expectations into read-only A_<key>; a bad one ends the probe
#   3. gather     gather_*: what several checks read (process status, mountinfo, routes, cgroup
#                 files, the launcher's pattern lists, environments, proxy-mode and Pod-mode
#                 network answers), read once into read-only S_*, MI_*, RT_*, CG_*, L_*, ENV_*,
#                 EG_*, RC_* variables.
#                 Gathering parses and validates;
#                 it never compares with an expectation.
#   4. checks     check_<id> ("." in the id as "_"), one per check: reads A_*, the gathered
#                 variables and files of its own, keeps everything else local, and reports one
#                 line through _p_line. No check reads what another check computed.
#   5. run        run_checks: the checks the launcher listed (checks=, launcher/checks.py), in
#                 that order, then PROBE-END; __sbx_probe_checks runs phases 2-5 (and, in a
#                 launch's proxy mode, waits with them for the launcher's word that the proxy is ready)
#   6. gate       __sbx_probe_gate: after PROBE-END ok, wait (bounded) for the launcher's word
#   7. exec       __sbx_probe_exec: only after phases 2-6 passed, in the probe's own process
#
# Design notes (why, not what):
# - The image is untrusted: every tool is "$BB" <applet>; a bare name is only ever a shell
#   builtin or a function of this file. PATH is /dev/null for phases 2-5 so a slip cannot reach
#   the image (an empty PATH would not do: ash then runs a bare name from the working directory).
# - The probe's own variables are A_*, S_*, MI_*, RT_*, CG_*, K_*, L_*, ENV_*, EG_*, RC_*, _* and BB
#   (a new one takes one of these): any of them the environment names is unset before phase 2.
#   The environment is read only for HOME, SANDBOX_NODE_IP and KUBERNETES_SERVICE_*.
# - Phases 2-5 run in a subshell: nothing they assign can leak into the agent's environment.
#   At top level the script assigns only __sbx_probe_* names, unset again; the exec step restores what ash itself changes
#   at startup (SHLVL, PWD) and verifies the exported environment is byte-identical to the one
#   the probe was given before it execs.
# - Fail closed: anything unreadable, unparsable or missing where required fails its check. A
#   write to a read-only variable ends the subshell, and with it the probe, without PROBE-END.
# - Never writes to /proc or /sys, never mounts, no network traffic beyond the proxy-mode and
#   Pod-mode checks. Write tests create a fresh name with O_EXCL (noclobber) and remove it again if the
#   creation unexpectedly succeeds; "open for writing" tests use ">>" on existing regular files
#   and write nothing.
# - Fast: files are read whole and split in memory (ash's read builtin does one syscall per
#   byte, and every syscall passes the seccomp filter); one find walks all mounts that can hold
#   sockets. About 30-40 ms in a Debian container.
# - ash scopes variables dynamically: a helper sees its caller's locals. Helpers name their
#   locals with a leading "_" so that a list they fill by name (_p_add) is never shadowed.

# =============================================================================================
# 1. library

# _p_line ID OK EXPECTED OBSERVED -- one result line; OK is 1 for pass, 2 for n/a (only for a
# check the plan's na= names: else it fails). _P_N and _P_FAILED are the report's counters,
# updated only here.
_p_line() {
	local _e _o _r
	_e=${3:--}
	_o=${4:--}
	# tabs, newlines, CRs and escapes would break the line format. Guarded: busybox's ${v//[...]/}
	# is quadratic (60 ms on a 1 KiB list), a case over the same class a single pass.
	case $_e in *[[:cntrl:]]*) _e=${_e//[[:cntrl:]]/ } ;; esac
	case $_o in *[[:cntrl:]]*) _o=${_o//[[:cntrl:]]/ } ;; esac
	if [ "$2" = 1 ]; then _r=pass
	elif [ "$2" = 2 ] && _p_in "$1" "$A_na"; then _r=n/a
	else _r=fail; _P_FAILED=1; fi
	_P_N=$((_P_N + 1))
	printf 'PROBE\t%s\t%s\t%s\t%s\n' "$1" "$_r" "$_e" "$_o"
}

# The helpers below that produce a string put it in _P_R (a command substitution would fork);
# the caller reads it at once.

# _p_esc VALUE -> _P_R: escaped like mountinfo (plus comma), for comparing and reporting
_p_esc() {
	_P_R=${1//\\/\\134}
	_P_R=${_P_R// /\\040}
	_P_R=${_P_R//$_P_TAB/\\011}
	_P_R=${_P_R//$_P_NL/\\012}
	_P_R=${_P_R//,/\\054}
}

# _p_dec ESCAPED -> _P_R: the real path (decodes \ooo; only forks when there is an escape)
_p_dec() {
	case $1 in
	*\\*) _P_R=$(printf '%bx' "$1"); _P_R=${_P_R%x} ;;
	*) _P_R=$1 ;;
	esac
}

# _p_add LISTVAR ITEM -- append ITEM to the comma list in LISTVAR unless already there
_p_add() {
	local _a
	eval "_a=\$$1"
	case ",$_a," in
	*",$2,"*) ;;
	*) eval "$1=\${_a:+\$_a,}\$2" ;;
	esac
}

# _p_in ITEM LIST -- true if ITEM is an element of comma list LIST
_p_in() {
	case ",$2," in *",$1,"*) return 0 ;; esac
	return 1
}

# _p_slash PATH -> _P_R: PATH with "/" appended unless it already ends with one
_p_slash() {
	case $1 in */) _P_R=$1 ;; *) _P_R=$1/ ;; esac
}

# _p_left PATH -- a probe file could not be removed again: reported as check "cleanup" at the end
_p_left() {
	_p_esc "$1"; _p_add _P_LEFT "$_P_R"
}

# _p_trycreate DIR -- 0 if a new file could be created in DIR (it is removed again)
_p_trycreate() {
	local _b _f _n
	_p_slash "$1"
	_b="$_P_R.sandbox-probe.$$"
	_f=$_b
	_n=0
	while [ -e "$_f" ] || [ -L "$_f" ]; do
		_n=$((_n + 1))
		[ "$_n" -lt 100 ] || return 0   # cannot find a free name: treat as writable
		_f="$_b.$_n"
	done
	if { true >"$_f"; } 2>/dev/null; then
		"$BB" rm -f -- "$_f" 2>/dev/null || _p_left "$_f"
		return 0
	fi
	return 1
}

# _p_firstmissing PATH -> _P_R: PATH does not exist: its first missing component; returns 2 if
# the nearest existing ancestor is not a directory
_p_firstmissing() {
	local _c _p
	_c=$1
	while :; do
		_p=${_c%/*}; [ -n "$_p" ] || _p=/
		{ [ -e "$_p" ] || [ -L "$_p" ]; } && break
		_c=$_p
	done
	_P_R=$_c
	[ -d "$_p" ] || return 2
}

# _p_validpath ESCAPED -- absolute, no raw whitespace, only \ooo escapes
_p_validpath() {
	local _r
	case $1 in /*) ;; *) return 1 ;; esac
	case $1 in *" "* | *"$_P_TAB"* | *"$_P_NL"*) return 1 ;; esac
	_r=$1
	while :; do
		case $_r in *\\*) ;; *) return 0 ;; esac
		_r=${_r#*\\}
		case $_r in [0-3][0-7][0-7]*) ;; *) return 1 ;; esac
	done
}

# _p_validlist LIST -- empty, or comma-separated valid paths
_p_validlist() {
	local _i
	[ -z "$1" ] && return 0
	case $1 in ,* | *, | *,,*) return 1 ;; esac
	set -f; IFS=,
	for _i in $1; do
		_p_validpath "$_i" || { IFS=$_P_IFS; set +f; return 1; }
	done
	IFS=$_P_IFS; set +f
	return 0
}

# _p_validtargets LIST -- empty, or comma-separated ADDRESS:PORT (an IPv6 address in brackets;
# ADDRESS gateway or node: the default gateway's, the node's)
_p_validtargets() {
	local _i _a
	[ -z "$1" ] && return 0
	case $1 in ,* | *, | *,,*) return 1 ;; esac
	set -f; IFS=,
	for _i in $1; do
		case ${_i##*:} in '' | *[!0-9]*) IFS=$_P_IFS; set +f; return 1 ;; esac
		_a=${_i%:*}
		case $_a in
		gateway | node) ;;
		\[*\]) case $_a in *[!0-9a-f:\[\]]*) _a= ;; esac ;;
		*) case $_a in *[!0-9.]*) _a= ;; esac ;;
		esac
		[ -n "$_a" ] || { IFS=$_P_IFS; set +f; return 1; }
	done
	IFS=$_P_IFS; set +f
	return 0
}

# _p_within SECONDS CMD... -- run CMD for at most SECONDS (fractions work, unlike busybox
# timeout, which counts whole seconds); its output and exit status are CMD's, 143 if cut off
_p_within() {
	local _s _p
	_s=$1; shift
	"$@" &
	_p=$!
	"$BB" sleep "$_s"
	kill "$_p" 2>/dev/null
	wait "$_p"
}

# _p_hexip HEX -> _P_R: little-endian hex of /proc/net/route as a dotted quad
_p_hexip() {
	_P_R=$((0x${1#??????})).$((0x$(printf '%s' "$1" | "$BB" cut -c5-6))).$((0x$(printf '%s' "$1" | "$BB" cut -c3-4))).$((0x${1%??????}))
}

# =============================================================================================
# 2. arguments: A_<key> for every key below, validated; anything wrong ends the probe with one
# "args" line and exit 97, before anything is gathered

parse_args() {
	local keys bad= seen= dash=0 nafter=0 arg k v ok
	keys=",uid,gid,capbnd,nnp,seccomp,rofs,writable,mounts,protected,workspace,wsroot,wsupper,home,homesrc,net,pids,mem,kernel,userns,proxy,denyhost,dnsname,resolver,na,"
	keys="${keys}checks,secretnames,secretvalues,runtimenames,runtimesockets,credpaths,gate,"
	keys="${keys}bump,bumphello,bumpca,refuse,tunnel,tunnelhello,"
	for arg in "$@"; do
		if [ "$dash" = 1 ]; then nafter=$((nafter + 1)); continue; fi
		case $arg in
		--) dash=1; continue ;;
		*=*) k=${arg%%=*}; v=${arg#*=} ;;
		*) _p_esc "$arg"; _p_add bad "bad:$_P_R"; continue ;;
		esac
		case $keys,forbidden,owntmpfs,keyvars,keyrefuse,keyhidden, in *",$k,"*) ;; *) _p_esc "$k"; _p_add bad "unknown:$_P_R"; continue ;; esac
		if _p_in "$k" "$seen"; then _p_add bad "duplicate:$k"; continue; fi
		_p_add seen "$k"
		eval "A_$k=\$v"
		ok=1
		case $k in
		uid | gid) case $v in '' | *[!0-9]*) ok=0 ;; esac ;;
		capbnd) case $v in *[!0-9a-fA-F]*) ok=0 ;; esac; [ "${#v}" = 16 ] || ok=0 ;;
		nnp) case $v in 0 | 1) ;; *) ok=0 ;; esac ;;
		seccomp) case $v in 0 | 1 | 2) ;; *) ok=0 ;; esac ;;
		pids | mem) case $v in max) ;; '' | *[!0-9]*) ok=0 ;; esac ;;
		net) case $v in none | proxy | pod | podproxy) ;; *) ok=0 ;; esac ;;
		forbidden) _p_validtargets "$v" || ok=0 ;;
		kernel) case $v in host | gvisor) ;; *) ok=0 ;; esac ;;
		userns) case $v in - | remapped) ;; *) ok=0 ;; esac ;;
		proxy) case $v in -) ;; *:*[!0-9]* | :* | *: | *[!a-z0-9.:-]*) ok=0 ;; *:*) ;; *) ok=0 ;; esac ;;
		denyhost | dnsname) case $v in -) ;; '' | *[!a-z0-9.-]*) ok=0 ;; esac ;;
		bump | tunnel) case $v in -) ;; *:*[!0-9]* | :* | *: | *[!a-z0-9.:-]*) ok=0 ;; *:*) ;; *) ok=0 ;; esac ;;
		bumphello | tunnelhello) case $v in -) ;; '' | *[!0-7\\]*) ok=0 ;; esac ;;
		bumpca) [ "$v" = - ] || _p_validpath "$v" || ok=0 ;;
		refuse) case $v in *[!A-Za-z0-9@:/._~,-]* | ,* | *, | *,,*) ok=0 ;; esac ;;
		resolver) case $v in - | 127.0.0.1 | 127.0.0.11) ;; *) ok=0 ;; esac ;;
		gate) case $v in -) ;; '' | 0* | *[!0-9]* | ?????*) ok=0 ;; esac ;;
		workspace | wsroot | wsupper | home) [ "$v" = - ] || _p_validpath "$v" || ok=0 ;;
		homesrc) [ "$v" = tmpfs ] || _p_validpath "$v" || ok=0 ;;
		checks) case $v in '' | ,* | *, | *,,* | *[!a-z0-9._,]*) ok=0 ;; esac ;;
		na) case $v in ,* | *, | *,,* | *[!a-z0-9._,]*) ok=0 ;; esac ;;
		secretnames | runtimenames) case $v in '' | *[!]A-Za-z0-9_*?,[]*) ok=0 ;; esac ;;
		secretvalues) [ -n "$v" ] || ok=0 ;;
		keyvars) case $v in ,* | *, | *,,* | *[!A-Za-z0-9_=,-]*) ok=0 ;; esac ;;
		keyrefuse | keyhidden) case $v in *@*:*/* ) ;; *) ok=0 ;; esac; case $v in *[!A-Za-z0-9@:/._~-]*) ok=0 ;; esac ;;
		credpaths) case $v in '' | /* | *,/* | *..*) ok=0 ;; esac ;;
		*) _p_validlist "$v" || ok=0 ;;
		esac
		[ "$ok" = 1 ] || { _p_esc "$v"; _p_add bad "invalid:$k=$_P_R"; }
	done
	set -f; IFS=,
	for k in ${keys#,}; do
		[ -n "$k" ] || continue
		_p_in "$k" "$seen" || _p_add bad "missing:$k"
	done
	IFS=$_P_IFS; set +f
	# forbidden= belongs to the Pod modes alone (CONTRACT.md): required there, refused elsewhere
	case $A_net in
	pod | podproxy) _p_in forbidden "$seen" || _p_add bad "missing:forbidden" ;;
	*) _p_in forbidden "$seen" && _p_add bad "invalid:forbidden for net=$A_net" ;;
	esac
	# the Pod modes accept a plugin's interface: never under Docker, which makes /.dockerenv in
	# every container (a Pod's image that carries one fails closed)
	case $A_net in pod | podproxy) [ ! -e /.dockerenv ] || _p_add bad "invalid:net=$A_net under Docker" ;; esac
	[ "$dash" = 1 ] || _p_add bad "missing:--"
	[ "$dash" = 1 ] && [ "$nafter" = 0 ] && _p_add bad "missing:agent-argv"
	if [ "$A_workspace" != - ] && [ "$A_wsroot" = - ]; then _p_add bad "invalid:wsroot=-"; fi
	if [ "$A_home" = - ]; then _p_add bad "invalid:home=-"; fi
	# a check the plan marks not applicable is one it runs
	set -f; IFS=,
	for k in $A_na; do _p_in "$k" "$A_checks" || _p_add bad "invalid:na=$k"; done
	IFS=$_P_IFS; set +f
	# identity.userns is asked for exactly when the plan says the ids are remapped
	if _p_in identity.userns "$A_checks"; then [ "$A_userns" = remapped ]; else [ "$A_userns" = - ]; fi ||
		_p_add bad "invalid:userns=$A_userns"
	case $A_net in proxy | podproxy)
		{ [ "$A_proxy" = - ] || [ "$A_denyhost" = - ]; } && _p_add bad "invalid:proxy=-" ;;
	esac
	# resolver= (the one nameserver egress.dns accepts) belongs to proxy mode alone, and is required there
	if [ "$A_net" = proxy ]; then [ "$A_resolver" != - ]; else [ "$A_resolver" = - ]; fi ||
		_p_add bad "invalid:resolver=$A_resolver for net=$A_net"
	if [ -n "$bad" ]; then
		_p_line args 0 "key=value... -- argv" "$bad"
		printf 'PROBE-END\tfail\t%s\n' "$_P_N"
		exit 97
	fi
	case $A_capbnd in *[A-F]*) A_capbnd=$(printf '%s' "$A_capbnd" | "$BB" tr A-F a-f) ;; esac
	_p_dec "$A_wsroot"; _p_esc "$_P_R"; A_wsroot=$_P_R   # raw commas -> \054, like mountinfo fields
	_p_dec "$A_wsupper"; _p_esc "$_P_R"; A_wsupper=$_P_R
	_p_dec "$A_homesrc"; _p_esc "$_P_R"; A_homesrc=$_P_R
	set -f; IFS=,
	for k in ${keys#,}; do [ -z "$k" ] || readonly "A_$k"; done
	IFS=$_P_IFS; set +f
	A_forbidden=${A_forbidden-}
	A_keyvars=${A_keyvars-} A_keyrefuse=${A_keyrefuse-} A_keyhidden=${A_keyhidden-}   # optional: keys bound only
	readonly A_forbidden A_keyvars A_keyrefuse A_keyhidden
}

# =============================================================================================
# 3. gather

# /proc/$$/status, of the process that will exec the agent ($$ is it, also in the subshell):
#   S_OK             1 when it was read and has a Uid: line
#   S_<Field>        the value of Uid, Gid, CapInh, CapPrm, CapEff, CapBnd, CapAmb, NoNewPrivs,
#                    Seccomp (empty when missing) and Groups ("-" when missing), blanks squeezed
#                    at the ends and tabs as spaces
gather_status() {
	local st ln k v
	S_OK=1
	S_Uid= S_Gid= S_Groups=- S_CapInh= S_CapPrm= S_CapEff= S_CapBnd= S_CapAmb= S_NoNewPrivs= S_Seccomp=
	st=$("$BB" cat "/proc/$$/status" 2>/dev/null) || S_OK=0
	set -f; IFS=$_P_NL
	for ln in $st; do
		k=${ln%%:*}
		v=${ln#*:}
		v=${v//$_P_TAB/ }
		while :; do case $v in " "*) v=${v# } ;; *) break ;; esac; done
		while :; do case $v in *" ") v=${v% } ;; *) break ;; esac; done
		case $k in
		Uid | Gid | Groups | CapInh | CapPrm | CapEff | CapBnd | CapAmb | NoNewPrivs | Seccomp)
			eval "S_$k=\$v" ;;
		esac
	done
	IFS=$_P_IFS; set +f
	[ -n "$S_Uid" ] || S_OK=0
	readonly S_OK S_Uid S_Gid S_Groups S_CapInh S_CapPrm S_CapEff S_CapBnd S_CapAmb S_NoNewPrivs S_Seccomp
}

# /proc/$$/mountinfo; its fields:
#   id parent major:minor root mountpoint options [optional...] - fstype source superopts
#   MI_OK            1 when it was read and every line parsed (options hold rw or ro)
#   MI_ERR           what a mount check reports when MI_OK is not 1
#   MI_ROOT_OPTS, MI_SYS_OPTS, MI_PROCSYS_OPTS
#                    mount options of the visible /, /sys, /proc/sys (empty: no such mount;
#                    the last one listed at a point is the visible one)
#   MI_DEV_MM        major:minor of /dev ("none" without one): masked /proc paths are binds of
#                    /dev/null, so root /null on this device
#   MI_TABLE         one line per mount, "id parent major:minor root mountpoint options fstype superopts",
#                    commas in root and mountpoint as \054 so they compare with the A_* lists
#                    (mountinfo escapes blanks, so the fields split on spaces)
#   MI_POINTS        comma list of every mount point
gather_mountinfo() {
	local mi ln id par mm root mp opts fst sopts
	MI_OK=1
	MI_ERR="mountinfo unreadable or unparsable"
	mi=$("$BB" cat "/proc/$$/mountinfo" 2>/dev/null) || MI_OK=0
	[ -n "$mi" ] || MI_OK=0

	# one pass: the line shape, the mounts other rules refer to, and the table
	MI_ROOT_OPTS= MI_SYS_OPTS= MI_PROCSYS_OPTS= MI_DEV_MM=none MI_TABLE= MI_POINTS=
	set -f; IFS=$_P_NL
	for ln in $mi; do
		IFS=' '; set -- $ln
		[ "$#" -ge 9 ] || { MI_OK=0; continue; }
		id=$1 par=$2 mm=$3 root=$4 mp=$5 opts=$6
		shift 6
		while [ "$#" -gt 0 ] && [ "$1" != - ]; do shift; done
		[ "$#" -ge 2 ] || { MI_OK=0; continue; }
		fst=$2 sopts=${4:--}
		case $mp in
		/) MI_ROOT_OPTS=$opts ;;
		/sys) MI_SYS_OPTS=$opts ;;
		/proc/sys) MI_PROCSYS_OPTS=$opts ;;
		/dev) MI_DEV_MM=$mm ;;
		esac
		case $mp in /*) ;; *) MI_OK=0; continue ;; esac
		case $mm in *:*) ;; *) MI_OK=0; continue ;; esac
		case ",$opts," in *,rw,* | *,ro,*) ;; *) MI_OK=0 ;; esac
		mp=${mp//,/\\054}
		root=${root//,/\\054}
		MI_POINTS=${MI_POINTS:+$MI_POINTS,}$mp
		MI_TABLE="$MI_TABLE$id $par $mm $root $mp $opts $fst $sopts$_P_NL"
	done
	IFS=$_P_IFS; set +f
	[ "$MI_OK" = 1 ] || MI_TABLE= MI_POINTS=
	readonly MI_OK MI_ERR MI_ROOT_OPTS MI_SYS_OPTS MI_PROCSYS_OPTS MI_DEV_MM MI_TABLE MI_POINTS
}

# /proc/net/route (header line, then one line per IPv4 route):
#   RT_OK            1 when it could be opened
#   RT_N             number of routes (-1: not even the header line)
#   RT_DEVS          comma list of the interfaces the routes use
#   RT_GW            the default route's gateway, little-endian hex as in the file (empty: none)
#   RT_LINK          the first on-link route's destination (a subnet on the interface), the same way
#   RT_LINKMASK      its mask, the same way
gather_routes() {
	local ln
	RT_OK=1 RT_N=-1 RT_DEVS= RT_GW= RT_LINK= RT_LINKMASK=
	if { while IFS= read -r ln; do
		RT_N=$((RT_N + 1))
		[ "$RT_N" -gt 0 ] || continue
		set -f; set -- $ln; set +f
		_p_in "$1" "$RT_DEVS" || _p_add RT_DEVS "$1"
		if [ "$2" = 00000000 ]; then RT_GW=$3
		elif [ "$3" = 00000000 ] && [ -z "$RT_LINK" ]; then RT_LINK=$2 RT_LINKMASK=$8; fi
	done </proc/net/route; } 2>/dev/null; then :; else RT_OK=0; fi
	readonly RT_OK RT_N RT_DEVS RT_GW RT_LINK RT_LINKMASK
}

# the kernel under the sandbox: gVisor's procfs has /proc/sentry-meminfo, which no Linux kernel
# has (the image cannot add it: /proc is the kernel's own):
#   K_GVISOR         1 on gVisor, else 0
#   K_VERSION        the first line of /proc/version ("unreadable" when it is not)
gather_kernel() {
	K_GVISOR=0
	[ -e /proc/sentry-meminfo ] && K_GVISOR=1
	K_VERSION=unreadable
	{ IFS= read -r K_VERSION </proc/version; } 2>/dev/null
	readonly K_GVISOR K_VERSION
}

# _p_gvisor -- true when the plan says gVisor and the probe runs on gVisor: only then do the
# checks accept what gVisor's kernel shows differently (images/probe/CONTRACT.md, "gVisor")
_p_gvisor() {
	[ "$A_kernel" = gvisor ] && [ "$K_GVISOR" = 1 ]
}

# the cgroup files of the limits (v2 when cgroup.controllers exists, else v1):
#   CG_PIDS, CG_MEM  paths of the pids and memory limit
gather_cgroup() {
	if [ -e /sys/fs/cgroup/cgroup.controllers ]; then
		CG_PIDS=/sys/fs/cgroup/pids.max; CG_MEM=/sys/fs/cgroup/memory.max
	else
		CG_PIDS=/sys/fs/cgroup/pids/pids.max; CG_MEM=/sys/fs/cgroup/memory/memory.limit_in_bytes
	fi
	readonly CG_PIDS CG_MEM
}

# every readable environment: the probe's own first, then each /proc/*/environ; unreadable ones
# are skipped. Entries stay raw (a value may hold any byte but NUL), one variable each:
#   ENV_N            number of entries
#   ENV_1 ... ENV_<ENV_N>  NAME=value, as in the file
# the launcher's pattern lists, decoded from their arguments once, one glob a line
_p_lines() {   # -> _P_R (no subshell: it would fork)
	local p r=
	set -f; IFS=,
	for p in $1; do IFS=$_P_IFS; _p_dec "$p"; r="$r$_P_R$_P_NL"; IFS=,; done
	IFS=$_P_IFS; set +f
	_P_R=$r
}

gather_lists() {
	_p_lines "$A_secretnames"; L_SECRETNAMES=$_P_R
	_p_lines "$A_secretvalues"; L_SECRETVALUES=$_P_R
	_p_lines "$A_runtimenames"; L_RUNTIMENAMES=$_P_R
	_p_lines "$A_keyvars"; L_KEYVARS=$_P_R
	readonly L_SECRETNAMES L_SECRETVALUES L_RUNTIMENAMES L_KEYVARS
}

gather_environ() {
	local f e own=0
	ENV_N=0
	for f in /proc/$$/environ /proc/[0-9]*/environ; do
		[ "$f" = "/proc/$$/environ" ] && { own=$((own + 1)); [ "$own" = 1 ] || continue; }
		{ while IFS= read -r -d '' e; do
			ENV_N=$((ENV_N + 1))
			eval "ENV_$ENV_N=\$e; readonly ENV_$ENV_N"
		done <"$f"; } 2>/dev/null
	done
	readonly ENV_N
}

# proxy mode only: what the network answers, from the sandbox's own network namespace. The
# three observations run concurrently (each waits a moment for something that must not answer)
# and print "key<TAB>value" lines:
#   EG_GW_IP         where the host's side of the network may be, dotted quads: the default gateway;
#                    without a default route, every address of the interface's subnet when it is a
#                    /28 or smaller (the launcher's), else its first address (where engines put the
#                    host's bridge), but the sandbox's own and the proxy's (empty: none left)
#   EG_REPORTED      comma list of the observations that reported (proxy, direct, dns)
#   EG_PROXY         first line of the proxy's answer to a request for A_denyhost (empty: none)
#   EG_DIRECT        "address:port:connected|refused|blocked ..." for direct connections to EG_GW_IP
#   EG_DNS           what a query for A_dnsname got (_p_lookup): "answered", "no answer within
#                    <window>s", "unknown(...)"; with Docker's resolver, "relayed to the sandbox's
#                    own 127.0.0.1:53" or what was seen instead
gather_egress() {
	local out ln
	EG_GW_IP= EG_NOGW="no default route, no subnet"
	if [ -n "$RT_GW" ]; then
		_p_hexip "$RT_GW"; EG_GW_IP=$_P_R
	elif [ -n "$RT_LINK" ]; then
		_p_link_targets
		[ -n "$EG_GW_IP" ] || EG_NOGW="no default route; no address of the subnet but the sandbox's and the proxy's"
	fi
	out=$( {
		_p_ask_proxy &
		# podproxy: pod.reach and pod.dns observe the rest (gather_reach)
		[ -z "$EG_GW_IP" ] || [ "$A_net" = podproxy ] || _p_try_gateway &
		[ "$A_dnsname" = - ] || [ "$A_net" = podproxy ] || _p_lookup &
		# rules per request (bump=, refuse=, tunnel=: only when the plan has http: rules)
		[ "$A_bump" = - ] || _p_ask_tls bump "$A_bump" "$A_bumphello" &
		[ -z "$A_refuse" ] || _p_ask_refuse &
		[ "$A_tunnel" = - ] || _p_ask_tls tunnel "$A_tunnel" "$A_tunnelhello" &
		[ -z "$A_keyrefuse" ] || _p_ask_placeholder keyrefuse GET "${A_keyrefuse#*@}" "${A_keyrefuse%%@*}" &
		[ -z "$A_keyhidden" ] || _p_ask_placeholder keyhidden "${A_keyhidden%%@*}" "${A_keyhidden#*@}" X-Sandbox-Probe &
		wait
	} )
	EG_REPORTED= EG_PROXY= EG_DIRECT= EG_DNS= EG_BUMP= EG_REFUSE= EG_TUNNEL= EG_KEY= EG_KEYHIDDEN=
	set -f; IFS=$_P_NL
	for ln in $out; do
		case $ln in
		bump"$_P_TAB"*) EG_BUMP=${ln#*"$_P_TAB"}; _p_add EG_REPORTED bump ;;
		refuse"$_P_TAB"*) EG_REFUSE=${ln#*"$_P_TAB"}; _p_add EG_REPORTED refuse ;;
		tunnel"$_P_TAB"*) EG_TUNNEL=${ln#*"$_P_TAB"}; _p_add EG_REPORTED tunnel ;;
		keyrefuse"$_P_TAB"*) EG_KEY=${ln#*"$_P_TAB"}; _p_add EG_REPORTED keyrefuse ;;
		keyhidden"$_P_TAB"*) EG_KEYHIDDEN=${ln#*"$_P_TAB"}; _p_add EG_REPORTED keyhidden ;;
		proxy"$_P_TAB"*) EG_PROXY=${ln#*"$_P_TAB"}; _p_add EG_REPORTED proxy ;;
		direct"$_P_TAB"*) EG_DIRECT=${ln#*"$_P_TAB"}; _p_add EG_REPORTED direct ;;
		dns"$_P_TAB"*) EG_DNS=${ln#*"$_P_TAB"}; _p_add EG_REPORTED dns ;;
		esac
	done
	IFS=$_P_IFS; set +f
	readonly EG_GW_IP EG_NOGW EG_REPORTED EG_PROXY EG_DIRECT EG_DNS EG_BUMP EG_REFUSE EG_TUNNEL EG_KEY EG_KEYHIDDEN
}

# one plain-HTTP request for the deny-test host through the proxy. A launch starts the sandbox
# alongside its proxy (launcher/egress/proxy.py), before the proxy's container runs, and the
# launcher says when the proxy is ready (a line on fd 3 within _P_WORD seconds, see
# __sbx_probe_checks): the request waits for that word, however long the engine takes to start the
# proxy (no process runs meanwhile: ash's read blocks), and then its 15 s begin. Until the
# proxy's container has joined the network its name does not resolve (Docker: the resolver is
# silent, nc's 3 s alarm ends the try) or its pinned address has no owner (podman: "No route to
# host"), and until Squid listens it refuses: each is tried again, every 20 ms, until 15 s have
# passed. Without a launcher (gate=-) the 15 s begin at once. The word only says when to ask: the
# proxy's own answer is the observation. With rules per request the sandbox starts only once the
# proxy is ready, so the other asks need no such wait.
_p_ask_proxy() {
	local _r _end
	if [ -n "$_P_WORD" ]; then   # any line is the word (it only says when to ask); none: the bound
		IFS= read -r -t "$_P_WORD" _r <&3
		exec 3<&-
	fi
	_end=$(($("$BB" date +%s) + 15))
	while :; do
		# busybox nc hangs up when its input ends, and Squid drops a request whose client left: the
		# program nc runs once connected (the socket its fd 0 and 1) sends the request and reads the
		# answer's first line (at once for a 403), so nothing waits a fixed time for it (ash's read:
		# busybox's timeout would leave its watcher for a second, into the agent's session)
		_r=$("$BB" nc -w 3 "${A_proxy%:*}" "${A_proxy##*:}" -e "$BB" sh -c \
			'printf "GET http://%s/ HTTP/1.0\r\nHost: %s\r\n\r\n" "$2" "$2"; IFS= read -r -t 3 l; printf "%s\n" "$l" >&2' \
			sh "$BB" "$A_denyhost" </dev/null 2>&1 | "$BB" head -n 1)
		case $_r in
		*"bad address"* | *"onnection refused"* | *"o route to host"* | "nc: timed out")
			[ "$("$BB" date +%s)" -lt "$_end" ] || break ;;
		*) break ;;
		esac
		"$BB" usleep 20000
	done
	printf 'proxy\t%s\n' "${_r%"$_P_CR"}"
}

# KEY HOST:PORT HELLO -- through the proxy, CONNECT HOST:PORT and send the plan's TLS 1.2
# ClientHello (printf octal escapes: busybox has no TLS client); TLS 1.2 shows the certificate in
# the clear. Prints "KEY<TAB>" the CONNECT's status line and the "sandbox egress CA <id>" name the
# answer carries (the issuer of the proxy's own certificates), ";"-separated.
_p_ask_tls() {
	local _r
	_r=$( { printf 'CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n' "$2" "$2"; "$BB" sleep 0.3; printf "$3"; "$BB" sleep 1; } |
		"$BB" nc -w 3 "${A_proxy%:*}" "${A_proxy##*:}" 2>&1 | "$BB" tr -c 'A-Za-z0-9 ./' '\n' |
		"$BB" grep -E -o '^HTTP/1\.[01] [0-9]+|sandbox egress CA [0-9a-f]{16}' | "$BB" head -n 3 | "$BB" tr '\n' ';')
	printf '%s\t%s\n' "$1" "$_r"
}

# one plain request per refuse= entry (METHOD@HOST:PORT/PATH), all at once: "ENTRY=STATUS;MARK;"
# each, space-separated (MARK: the proxy's own refusal page, "refused by the egress policy")
_p_ask_refuse() {
	local _i _obs
	_obs=$(set -f; IFS=,; for _i in $A_refuse; do (
		_m=${_i%%@*}; _t=${_i#*@}; _hp=${_t%%/*}
		_r=$( { printf '%s http://%s HTTP/1.0\r\nHost: %s\r\nContent-Length: 0\r\n\r\n' "$_m" "$_t" "$_hp"; "$BB" sleep 0.5; } |
			"$BB" nc -w 3 "${A_proxy%:*}" "${A_proxy##*:}" 2>&1 | "$BB" tr -d '\r' |
			"$BB" grep -E -o '^HTTP/1\.[01] [0-9]+|refused by the egress policy' | "$BB" head -n 2 | "$BB" tr '\n' ';')
		printf '%s=%s\n' "$_i" "$_r" ) &
	done; wait)
	printf 'refuse\t%s\n' "$(printf '%s' "$_obs" | "$BB" sort | "$BB" tr '\n' ' ')"
}

# a key bound to its destination: its placeholder (the first keyvars= value) in HEADER of a plain
# METHOD request to TARGET (HOST:PORT/PATH): "NAME<TAB>STATUS;MARK;" (MARK: the proxy's own
# refusal, "refused by the egress policy: placeholder of"). keyrefuse= (HEADER@TARGET): its own
# header, to another allowed destination; keyhidden= (METHOD@TARGET): X-Sandbox-Probe, a header the
# key helper is not handed, to the key's own host, port and path with a method its rule allows,
# which every rule lets through but the key ICAP service (it reads every header)
_p_ask_placeholder() {
	local _v _r
	_v=${L_KEYVARS%%"$_P_NL"*}; _v=${_v#*=}
	_r=$( { printf '%s http://%s HTTP/1.0\r\nHost: %s\r\n%s: %s\r\n\r\n' "$2" "$3" "${3%%/*}" "$4" "$_v"; "$BB" sleep 0.5; } |
		"$BB" nc -w 3 "${A_proxy%:*}" "${A_proxy##*:}" 2>&1 | "$BB" tr -d '\r' |
		"$BB" grep -E -o '^HTTP/1\.[01] [0-9]+|refused by the egress policy: placeholder of' | "$BB" head -n 2 | "$BB" tr '\n' ';')
	printf '%s\t%s\n' "$1" "$_r"
}

# the name of this sandbox's own CA, from the CA file the plan names (bumpca=): the last
# certificate there (the proxy's, appended at start), decoded, its "sandbox egress CA <id>"
_p_own_ca() {
	"$BB" awk '/-----BEGIN CERTIFICATE-----/ { b = ""; next } /-----END CERTIFICATE-----/ { last = b; next } { b = b $0 "\n" }
		END { printf "%s", last }' "$A_bumpca" 2>/dev/null | "$BB" base64 -d 2>/dev/null | "$BB" tr -c 'A-Za-z0-9 ' '\n' |
		"$BB" grep -E -o 'sandbox egress CA [0-9a-f]{16}' | "$BB" head -n 1
}

# direct connections to the gateway, a few ports at once. Each verdict is what connect() itself
# answered, never an exit status: nc's own -w alarm says "timed out" while connect() still waits
# for an answer (the alarm is armed just before it, so a slow start costs no time of the window),
# a refused or unreachable port answers at once with its error, and -e runs the connected marker
# only once connect() returned 0. gVisor's hostinet (2022) sometimes returns 0 while the socket is
# still SYN_SENT; the marker then reads the socket's state from /proc/net/tcp and that attempt is
# tried again (an nc with stdin at EOF turned such a socket into exit 0, seen as "connected").
# Under runc the plan's ARP settings (launcher/egress/squid.py ARP_SYSCTLS) make the ownerless
# gateway unreachable within ~50 ms: "No route to host" is the usual answer, the 1 s only a bound.
# Each address in turn (its ports at once): a subnet's worth of connects at once could meet a small
# pids limit, and an ownerless address answers "No route to host" within ~50 ms.
_p_try_gateway() {
	local _port _obs _a
	_obs=$(for _a in $EG_GW_IP; do for _port in 80 443 22 2375; do _p_try_port "$_a" "$_port" & done; wait; done)
	printf 'direct\t%s\n' "$(printf '%s' "$_obs" | "$BB" sort | "$BB" tr '\n' ' ')"
}

# _p_link_targets -> EG_GW_IP: without a default route, the addresses of the interface's subnet
# where the host may be (see gather_egress), but the sandbox's own (/proc/net/fib_trie's local
# ones) and the proxy's (its name's /etc/hosts entry: podman's plans have one, the probe runs
# before anything in the sandbox could change it)
_p_link_targets() {
	local net mask size i last own proxy
	_p_hexip "$RT_LINK"; net=$_P_R
	_p_hexip "$RT_LINKMASK"; mask=$_P_R
	size=2
	case $mask in 255.255.255.*) [ $((256 - ${mask##*.})) -gt 16 ] || size=$((256 - ${mask##*.})) ;; esac
	own=" $("$BB" awk '/[|]--/ { a = $2 } /\/32 host LOCAL/ { print a }' /proc/net/fib_trie 2>/dev/null | "$BB" tr '\n' ' ')"
	proxy=" $("$BB" awk -v h="${A_proxy%:*}" '$1 !~ /^#/ { for (i = 2; i <= NF; i++) if ($i == h) print $1 }' /etc/hosts 2>/dev/null | "$BB" tr '\n' ' ')"
	last=$((size - 2)); [ "$last" -ge 1 ] || last=1
	i=1
	while [ "$i" -le "$last" ]; do
		_P_R=${net%.*}.$((${net##*.} + i))
		case "$own$proxy" in *" $_P_R "*) ;; *) EG_GW_IP="${EG_GW_IP:+$EG_GW_IP }$_P_R" ;; esac
		i=$((i + 1))
	done
}

# _p_try_port ADDRESS PORT -- prints ADDRESS:PORT:connected|refused|blocked|unsettled|unknown(...)
_p_try_port() {
	local _v
	_p_connect "$1" "$2"
	# any connect() error but a refusal is no path to the host (the Pod modes are stricter)
	case $_P_R in noroute | silent | error*) _v=blocked ;; *) _v=$_P_R ;; esac
	echo "$1:$2:$_v"
}

# _p_connect HOST PORT -> _P_R: connected, refused, noroute, silent, unsettled, error(...) or
# unknown(...), what a TCP connect() to HOST answered within 1 s; a new attempt (at most 3) while connect() returns
# before the handshake is done. The -e program gets busybox as $1 and the socket as fd 0: "early"
# only where the kernel lists that socket as SYN_SENT (02); any other state, or none found, counts
# as connected. "No route to host", "Network is unreachable", no source address of the family and
# a refusal to send are noroute; nc's own alarm is silent; another connect() error is error(...).
_p_connect() {
	local _n _e _prog
	_prog='i=$("$1" readlink /proc/self/fd/0); i=${i#socket:[}; i=${i%]}
st=$("$1" awk -v i="$i" '"'"'$10 == i { print $4 }'"'"' /proc/net/tcp /proc/net/tcp6 2>/dev/null)
case $st in 02) echo "state early" >&2 ;; *) echo "state connected" >&2 ;; esac'
	for _n in 1 2 3; do
		_e=$("$BB" nc -w 1 "$1" "$2" -e "$BB" sh -c "$_prog" sh "$BB" </dev/null 2>&1)
		case $_e in
		*"state early"*) continue ;;
		*"state connected"*) _P_R=connected ;;
		*"can't connect to remote host"*refused*) _P_R=refused ;;
		*"can't connect to remote host"*"o route to host"* | *"can't connect to remote host"*"etwork is unreachable"*)
			_P_R=noroute ;;
		# no address of that family to send from (IPv6 off, or no IPv6 at all), or the Pod's own
		# netfilter refused to send (EPERM, EACCES): nothing left either
		*"can't connect to remote host"*"annot assign requested address"* | *"ddress family not supported"* | \
			*"can't connect to remote host"*"peration not permitted"* | *"can't connect to remote host"*"ermission denied"*)
			_P_R=noroute ;;
		"nc: timed out" | *"can't connect to remote host"*"imed out"*) _P_R=silent ;;
		*"can't connect to remote host"*) _p_esc "$_e"; _P_R="error($_P_R)" ;;
		*) _p_esc "$_e"; _P_R="unknown($_P_R)" ;;
		esac
		return
	done
	_P_R=unsettled
}

# a name only the proxy may resolve (A_dnsname) must get no DNS answer from the sandbox; how that
# is shown depends on the one nameserver the plan gives it (A_resolver):
# - 127.0.0.1 (podman: its internal network has no DNS server): the sandbox's own loopback, where
#   nothing listens. One query: any reply (an address, NXDOMAIN, SERVFAIL) is a channel out, however
#   late (4.5 s); "Connection refused" is none, and comes at once.
# - 127.0.0.11, Docker's embedded resolver (it answers the proxy's name): it forwards every other
#   name to its upstream, the plan's Dns (127.0.0.1), dialled from the sandbox's own network
#   namespace, and when that fails it does not answer at all (engine 20.10, measured) — as it does
#   not for up to 4 s while a slow upstream thinks, so its silence proves nothing soon. The probe
#   proves where the forward goes instead (_p_relayed): it listens on port 53 itself for that moment
#   and passes only when its own query (a random id) arrives there from 127.0.0.1 — a connection
#   only the sandbox's own namespace can make: the resolver's upstream is the sandbox's loopback,
#   where nothing listens once the agent runs. Silence fails (a forward elsewhere, or none), and
#   so does any answer to the same name over UDP beside it (a late one too: it is waited for).
#   Under gVisor (_p_relays) the agent's uid may not listen on port 53 (gVisor asks for
#   CAP_NET_BIND_SERVICE whatever the namespace's sysctl): there the query is the first kind's,
#   and its 4.5 s of silence, past the 4 s for which the resolver relays an upstream's answer, pass.
_p_lookup() {
	local _r _w=4.5
	if _p_relays; then _p_relayed "$_w"; return; fi
	_r=$(_p_within "$_w" "$BB" nslookup -type=a "$A_dnsname" 2>&1)
	case $_r in
	*Server:* | *Name:* | *"can't find"*) printf 'dns\tanswered\n' ;;
	*"onnection refused"* | *"timed out"* | '' | Terminated) printf 'dns\tno answer within %ss\n' "$_w" ;;
	*) _p_esc "$_r"; printf 'dns\tunknown(%s)\n' "$_P_R" ;;
	esac
}

# _p_relays -- true where egress.dns is proven by seeing Docker's resolver forward (_p_lookup)
_p_relays() {
	[ "$A_resolver" = 127.0.0.11 ] && ! _p_gvisor
}

# _p_relayed WINDOW -- Docker's resolver: one query for A_dnsname over TCP (a random id; the
# resolver forwards over the client's protocol), while a listener on port 53 (busybox's nc: TCP
# only) waits up to WINDOW seconds for the forward and reports what arrived and from where (the
# peer of its socket, by inode, in /proc/net/tcp*), and one query over UDP beside it, cut off when
# the forward arrived or the window ended. Prints "dns<TAB>relayed to the sandbox's own 127.0.0.1:53"
# only for the probe's own query from 127.0.0.1; else what was seen.
_p_relayed() {
	local _w=$1 _q _want _n _r _heard= _peer= _raw _udp= ln
	_p_dnsquery "$A_dnsname"; _q=$_P_R; _want=$_P_HEX; _n=$_P_LEN
	_r=$( {   # (stderr: the shell's own "Terminated" for the query it ends)
		"$BB" nc -l -p 53 -e "$BB" sh -c 'i=$("$1" readlink /proc/self/fd/0); i=${i#socket:[}; i=${i%]}
q=$("$1" head -c "$2" | "$1" xxd -p | "$1" tr -d "\n")
p=$("$1" awk -v i="$i" '"'"'$10 == i { print $3 }'"'"' /proc/net/tcp /proc/net/tcp6 2>/dev/null)
printf "heard\t%s\t%s\n" "$q" "$p" >&2' sh "$BB" "$_n" 2>&1 &
		_c=$!
		# the window: ended early (TERM), it ends its sleep too, or the sleep would outlive the probe
		# into the agent's session ($!: set at the sleep's fork, whenever the trap runs after it)
		( trap 'kill $! 2>/dev/null; exit 0' TERM; "$BB" sleep "$_w" & wait $!; kill "$_c" 2>/dev/null ) >/dev/null 2>&1 &
		_k=$!
		if _p_listening 0035 "$_c"; then
			# busybox nc hangs up when its input ends: the resolver has the query by then
			printf "$_q" | "$BB" nc "$A_resolver" 53 >/dev/null 2>&1 &
			"$BB" nslookup -type=a "$A_dnsname" "$A_resolver" 2>&1 &
			_u=$!
			wait "$_c"
			kill "$_u" 2>/dev/null; wait "$_u"
		else
			printf 'nolisten\n'
		fi
		kill "$_c" "$_k"
	} 2>/dev/null )
	set -f; IFS=$_P_NL
	for ln in $_r; do
		case $ln in
		heard"$_P_TAB"*) ln=${ln#*"$_P_TAB"}; _heard=${ln%%"$_P_TAB"*}; _peer=${ln#*"$_P_TAB"} ;;
		*Server:* | *Name:* | *"can't find"*) _udp=answered ;;
		esac
	done
	IFS=$_P_IFS; set +f
	if [ -n "$_udp" ]; then
		printf 'dns\tanswered%s\n' "${_heard:+ (and relayed to port 53 here)}"
	elif [ -z "$_heard" ]; then
		case $_r in
		*nolisten*) _p_esc "${_r%nolisten*}"; printf 'dns\tcould not listen on port 53 (%s)\n' "$_P_R" ;;
		*) printf 'dns\tnot relayed to the sandbox'"'"'s own 127.0.0.1:53, no answer within %ss\n' "$_w" ;;
		esac
	else
		_raw=$_peer
		case $_peer in
		0100007F:* | 0000000000000000FFFF00000100007F:*) ;;
		*) _peer=bad ;;
		esac
		case "$_peer:$_heard" in
		bad:*) _p_esc "$_raw"; printf 'dns\trelayed to port 53 here from elsewhere (%s)\n' "$_P_R" ;;
		*:"$_want") printf 'dns\trelayed to the sandbox'"'"'s own 127.0.0.1:53\n' ;;
		*) printf 'dns\trelayed to port 53 here, another query (%s)\n' "$_heard" ;;
		esac
	fi
}

# _p_dnsquery NAME -> _P_R: a DNS query for NAME's A record with a random id, framed for TCP (two
# bytes of length first), as printf octal escapes; _P_HEX: the same bytes in hex; _P_LEN: their number
_p_dnsquery() {
	local _b _l _q=
	for _b in $("$BB" od -An -N2 -tu1 /dev/urandom); do _q="$_q\\$(printf '%03o' "$_b")"; done
	_q="$_q\\001\\000\\000\\001\\000\\000\\000\\000\\000\\000"   # RD; one question
	set -f; IFS=.
	for _l in $1; do _q="$_q\\$(printf '%03o' "${#_l}")$_l"; done
	IFS=$_P_IFS; set +f
	_q="$_q\\000\\000\\001\\000\\001"   # the root; type A, class IN
	_P_LEN=$((${#1} + 18))
	_P_R="\\$(printf '%03o' $((_P_LEN / 256)))\\$(printf '%03o' $((_P_LEN % 256)))$_q"
	_P_HEX=$(printf "$_P_R" | "$BB" xxd -p | "$BB" tr -d '\n')
	_P_LEN=$((_P_LEN + 2))
}

# _p_listening PORT PID -- 0 once a TCP socket listens on hex PORT (/proc/net/tcp*), while PID (the
# listener, ended at its window) lives: a loaded machine may take a while to start it
_p_listening() {
	local _i=0
	while [ "$_i" -lt 1000 ]; do
		"$BB" awk -v p=":$1" 'substr($2, length($2) - 4) == p && $4 == "0A" { f = 1 } END { exit !f }' \
			/proc/net/tcp /proc/net/tcp6 2>/dev/null && return 0
		kill -0 "$2" 2>/dev/null || return 1
		"$BB" usleep 5000
		_i=$((_i + 1))
	done
	return 1
}

# pod and podproxy modes only: what answers from the Pod's network (CONTRACT.md, "The Pod modes").
# Every target is tried at once, in one window of about 1 s, and each verdict is what connect()
# answered, never a guess from an exit status:
#   RC_REPORTED      comma list of the observations that reported (reach, dns, control)
#   RC_REACH         "target:verdict ..." (verdicts of _p_connect; target ADDRESS:PORT, or
#                    node:none when the node's address is missing or malformed)
#   RC_DNS           "server:answered|silent|refused|noroute|unknown ..." for one query to each
#                    nameserver of /etc/resolv.conf and each forbidden address on port 53
#   RC_CONTROL       what shows that this network answers within the window, so that silence
#                    elsewhere is a drop: podproxy "proxy:connected" (the allowed path, tried in
#                    the same window); pod "gateway:answered" when /proc/net/arp lists the default
#                    gateway resolved after the tries (the link answers below any policy); else
#                    what was seen instead
gather_reach() {
	local out ln targets= dns= gw= node= t h p ns
	[ -z "$RT_GW" ] || { _p_hexip "$RT_GW"; gw=$_P_R; }
	# The node's address from the Downward API (status.hostIP); missing or malformed fails.
	case ${SANDBOX_NODE_IP:-x} in
	*[!0-9a-f.:]* | *.*:* | *:*.*) ;;
	*:*) node=[$SANDBOX_NODE_IP] ;;
	*) node=$SANDBOX_NODE_IP ;;
	esac
	set -f; IFS=,
	for t in $A_forbidden; do
		# gateway:PORT and node:PORT stand for the default gateway (often the node itself) and the
		# node; without a default route there is no gateway to try
		case $t in
		gateway:*) [ -n "$gw" ] || continue; t=$gw:${t#gateway:} ;;
		node:*) if [ -n "$node" ]; then t=$node:${t#node:}; else t=node:none; fi ;;
		esac
		targets="$targets $t"
		case $t in
		node:none) ;;
		*:53) h=${t%:53}; h=${h#[}; h=${h%]}; _p_in "$h" "${dns// /,}" || dns="$dns $h" ;;
		esac
	done
	IFS=$_P_IFS; set +f
	# The API server's Service, as the kubelet tells every container (enableServiceLinks or not).
	h=${KUBERNETES_SERVICE_HOST-} p=${KUBERNETES_SERVICE_PORT:-443}
	if [ -n "$h" ]; then
		t=$h:$p
		case $h in *:*) t=[$h]:$p ;; esac
		case $h in *[!0-9a-f.:]*) t=kubernetes-service:malformed ;; esac
		case $p in *[!0-9]*) t=kubernetes-service:malformed ;; esac
		targets="$targets $t"
	fi
	for ns in $("$BB" awk '$1 == "nameserver" { print $2 }' /etc/resolv.conf 2>/dev/null); do
		case $ns in *[!0-9a-f.:]*) targets="$targets nameserver:malformed"; continue ;; esac
		dns="$dns $ns"
		case $ns in *:*) targets="$targets [$ns]:53" ;; *) targets="$targets $ns:53" ;; esac
	done
	out=$( {
		for t in $targets; do _p_reach_one "$t" & done
		for ns in $dns; do _p_ask_dns "$ns" & done
		[ "$A_net" != podproxy ] || { _p_connect "${A_proxy%:*}" "${A_proxy##*:}"; printf 'control\tproxy:%s\n' "$_P_R"; } &
		wait
	} )
	RC_REPORTED= RC_REACH= RC_DNS= RC_CONTROL=
	set -f; IFS=$_P_NL
	for ln in $out; do
		case $ln in
		reach"$_P_TAB"*) RC_REACH="$RC_REACH ${ln#*"$_P_TAB"}" ;;
		dns"$_P_TAB"*) RC_DNS="$RC_DNS ${ln#*"$_P_TAB"}" ;;
		control"$_P_TAB"*) RC_CONTROL=${ln#*"$_P_TAB"}; _p_add RC_REPORTED control ;;
		esac
	done
	IFS=$_P_IFS; set +f
	[ -z "$RC_REACH" ] || _p_add RC_REPORTED reach
	_p_add RC_REPORTED dns   # no nameserver at all is an answer too: nothing to ask
	if [ "$A_net" = pod ]; then
		RC_CONTROL=gateway:none
		[ -z "$gw" ] || { RC_CONTROL=gateway:silent; _p_arp_answered "$gw" && RC_CONTROL=gateway:answered; }
		_p_add RC_REPORTED control
	fi
	RC_REACH=${RC_REACH# } RC_DNS=${RC_DNS# }
	readonly RC_REPORTED RC_REACH RC_DNS RC_CONTROL
}

# _p_reach_one TARGET -- prints "reach<TAB>TARGET:verdict"; a target that is not ADDRESS:PORT
# (node:none, ...:malformed) reports itself as it is, and fails
_p_reach_one() {
	local _h
	case $1 in
	node:none | *:malformed) printf 'reach\t%s\n' "$1"; return ;;
	esac
	_h=${1%:*}; _h=${_h#[}; _h=${_h%]}
	_p_connect "$_h" "${1##*:}"
	printf 'reach\t%s:%s\n' "$1" "$_P_R"
}

# _p_ask_dns SERVER -- one query, at most 1 s: any reply (an answer, NXDOMAIN, REFUSED) is
# "answered": a resolver is reachable
_p_ask_dns() {
	local _r _n
	_n=$A_dnsname; [ "$_n" != - ] || _n=kubernetes.default.svc.cluster.local
	_r=$(_p_within 1 "$BB" nslookup "$_n" "$1" 2>&1)
	case $_r in
	*Server:* | *Name:* | *"can't find"*) _r=answered ;;
	*refused*) _r=refused ;;
	*nreachable* | *"o route"*) _r=noroute ;;
	'' | *"timed out"* | Terminated) _r=silent ;;   # its own timeout, or cut off by _p_within
	*) _p_esc "$_r"; _r="unknown($_P_R)" ;;
	esac
	printf 'dns\t%s:%s\n' "$1" "$_r"
}

# _p_arp_answered ADDRESS -- true when /proc/net/arp lists ADDRESS as resolved (flags 0x2: an
# ARP reply came) with a hardware address
_p_arp_answered() {
	"$BB" awk -v ip="$1" '$1 == ip && $3 == "0x2" && $4 != "00:00:00:00:00:00" { f = 1 } END { exit !f }' \
		/proc/net/arp 2>/dev/null
}

# =============================================================================================
# 4. checks, in report order

# _p_ids ID EXPECTED FIELDS -- identity.uid / identity.gid: all four status fields equal the
# expected id, which is not 0
_p_ids() {
	local _ok _v
	_ok=0; _v=$3
	if [ "$S_OK" = 1 ]; then
		set -f; set -- "$1" "$2" $_v; set +f
		[ "$#" = 6 ] && [ "$3" = "$2" ] && [ "$4" = "$2" ] && [ "$5" = "$2" ] &&
			[ "$6" = "$2" ] && [ "$2" != 0 ] && _ok=1
	else _v="status unreadable"; fi
	_p_line "$1" "$_ok" "$2" "$_v"
}

# the kernel the plan names: gVisor's own (kernel=gvisor), or the host's (kernel=host)
check_kernel_runtime() {
	local ok=0 k=host
	[ "$K_GVISOR" = 1 ] && k=gvisor
	[ "$k" = "$A_kernel" ] && ok=1
	_p_line kernel.runtime "$ok" "$A_kernel" "$k: $K_VERSION"
}

check_identity_uid() { _p_ids identity.uid "$A_uid" "$S_Uid"; }

check_identity_gid() { _p_ids identity.gid "$A_gid" "$S_Gid"; }

# no supplementary group 0
check_identity_groups() {
	local ok=0 obs g
	if [ "$S_OK" = 1 ] && [ "$S_Groups" != - ]; then
		ok=1
		set -f
		for g in $S_Groups; do
			case $g in 0) ok=0 ;; '' | *[!0-9]*) ok=0 ;; esac
		done
		set +f
		obs=$S_Groups
	else obs="status unreadable"; fi
	_p_line identity.groups "$ok" "no 0" "$obs"
}

# userns=remapped (a rootless or userns-remapped engine): no id inside is root outside. Each line
# of /proc/$$/uid_map and gid_map is "inside outside count"; a range whose outside start is 0 maps
# an id to the host's root (a rootful engine's identity map "0 0 4294967295" does). Unreadable,
# empty or unparsable: fail.
check_identity_userns() {
	local ok=1 obs= f m ln
	for f in uid gid; do
		m=$("$BB" cat "/proc/$$/${f}_map" 2>/dev/null) || m=
		[ -n "$m" ] || { ok=0; obs="$obs${obs:+ }$f=unreadable"; continue; }
		obs="$obs${obs:+ }$f="
		set -f; IFS=$_P_NL
		for ln in $m; do
			IFS=' '; set -- $ln
			if [ "$#" != 3 ]; then ok=0; obs="${obs}bad,"; continue; fi
			case $1$2$3 in *[!0-9]*) ok=0 ;; esac
			case $2 in *[!0]*) ;; *) ok=0 ;; esac   # outside 0: the host's root
			obs="$obs$1:$2:$3,"
		done
		IFS=$_P_IFS; set +f
		obs=${obs%,}
	done
	_p_line identity.userns "$ok" "no host root in uid_map, gid_map" "$obs"
}

# inheritable, permitted, effective, ambient all zero (one check: Docker clears Inh and never
# sets Amb for a non-root user, so they cannot fail on their own)
check_caps_process() {
	local ok=1 obs= k c
	for k in Inh Prm Eff Amb; do
		eval "c=\$S_Cap$k"
		# gVisor has no CapAmb line; ambient is a subset of Prm and Inh, both checked here
		[ "$k$c" = Amb ] && _p_gvisor && { obs="$obs Amb=not-shown(gvisor)"; continue; }
		[ "$c" = 0000000000000000 ] || ok=0
		obs="$obs ${k}=${c:-missing}"
	done
	_p_line caps.process "$ok" "Inh=Prm=Eff=Amb=0000000000000000" "${obs# }"
}

check_caps_bnd() {
	local ok=0
	[ -n "$S_CapBnd" ] && [ "$S_CapBnd" = "$A_capbnd" ] && ok=1
	_p_line caps.bnd "$ok" "$A_capbnd" "${S_CapBnd:-missing}"
}

check_nnp() {
	local ok=0
	[ -n "$S_NoNewPrivs" ] && [ "$S_NoNewPrivs" = "$A_nnp" ] && ok=1
	# gVisor has no NoNewPrivs line: nothing to observe inside; n/a where the plan says so (docker
	# inspect's SecurityOpt is the proof), a fail anywhere else
	[ -z "$S_NoNewPrivs" ] && _p_gvisor && { _p_line nnp 2 "$A_nnp" "not shown (gvisor has no NoNewPrivs line)"; return; }
	_p_line nnp "$ok" "$A_nnp" "${S_NoNewPrivs:-missing}"
}

check_seccomp_mode() {
	local ok=0
	[ -n "$S_Seccomp" ] && [ "$S_Seccomp" = "$A_seccomp" ] && ok=1
	_p_line seccomp.mode "$ok" "$A_seccomp" "${S_Seccomp:-missing}"
}

# a new user namespace (and a new net namespace) must be refused. No -r: mapping ids would
# mean writing /proc/self/uid_map.
check_seccomp_unshare() {
	local ok=1 obs= k o
	for k in U n; do
		o=$("$BB" unshare -"$k" "$BB" true 2>&1 </dev/null)
		if [ "$?" = 0 ]; then
			ok=0; o=succeeded
		else
			o=${o#unshare: }
			[ -n "$o" ] || o=failed
		fi
		obs="${obs:+$obs; }-$k: $o"
	done
	_p_line seccomp.unshare "$ok" "unshare -U and -n refused" "$obs"
}

check_fs_root_ro() {
	local ok=0 obs
	if [ "$MI_OK" = 1 ] && [ -n "$MI_ROOT_OPTS" ]; then
		case ",$MI_ROOT_OPTS," in *,ro,*) ok=1 ;; esac
		obs="/ $MI_ROOT_OPTS"
	elif [ "$MI_OK" = 1 ]; then obs="no / mount"
	else obs=$MI_ERR; fi
	_p_line fs.root_ro "$ok" "/ ro" "$obs"
}

# creating a file in these directories fails with EROFS. Any other refusal (EACCES as a
# non-root user) would hide a writable root, so it fails the check too.
check_fs_rofs() {
	local ok=1 obs= p d t e
	set -f; IFS=,
	for p in $A_rofs; do
		IFS=$_P_IFS; set +f
		_p_dec "$p"; d=$_P_R
		if [ -d "$d" ]; then
			_p_slash "$d"; t="$_P_R.sandbox-probe.$$"
		elif [ -e "$d" ] || [ -L "$d" ]; then
			t=
			ok=0; _p_add obs "notdir:$p"
		else
			t=$d   # creating the missing directory's name is refused the same way
		fi
		if [ -n "$t" ]; then
			if [ -e "$t" ] || [ -L "$t" ]; then ok=0; _p_add obs "exists:$p"
			elif e=$( { true >"$t"; } 2>&1 ); then
				"$BB" rm -f -- "$t" 2>/dev/null || _p_left "$t"
				ok=0; _p_add obs "writable:$p"
			else
				case $e in
				*"Read-only file system"*) ;;
				# gVisor checks the mode bits before the read-only mount: EACCES only where this
				# uid may not write anyway (a directory it may write must still give EROFS)
				*"Permission denied"*) _p_gvisor && [ ! -w "$d" ] || { ok=0; _p_add obs "not-erofs:$p"; } ;;
				*) ok=0; _p_add obs "not-erofs:$p" ;;
				esac
			fi
		fi
		set -f; IFS=,
	done
	IFS=$_P_IFS; set +f
	_p_line fs.rofs "$ok" "EROFS in $A_rofs" "$obs"
}

# /sys a read-only mount, /proc/sys a read-only mount, sysrq-trigger not writable
check_fs_sysfs_ro() {
	local ok=1 obs=
	if [ "$MI_OK" != 1 ]; then ok=0; obs=$MI_ERR
	else
		case ",$MI_SYS_OPTS," in
		*,ro,*) obs="/sys=ro" ;;
		,,) ok=0; obs="/sys=no-mount" ;;
		*) ok=0; obs="/sys=rw" ;;
		esac
		# /proc/sys must be its own read-only mount: file modes alone would also refuse a
		# non-root writer, and would hide a runtime that left it writable.
		case ",$MI_PROCSYS_OPTS," in
		*,ro,*) obs="$obs /proc/sys=ro" ;;
		# gVisor's /proc/sys is its own emulation, not the host's: no mount, writes refused
		,,) if _p_gvisor && ! { true >>/proc/sys/kernel/hostname; } 2>/dev/null; then
			obs="$obs /proc/sys=gvisor-refused"
		else ok=0; obs="$obs /proc/sys=no-mount"; fi ;;
		*) ok=0; obs="$obs /proc/sys=rw" ;;
		esac
	fi
	if { true >>/proc/sysrq-trigger; } 2>/dev/null; then
		ok=0; obs="$obs sysrq-trigger=writable"
	else obs="$obs sysrq-trigger=refused"; fi
	_p_line fs.sysfs_ro "$ok" "/sys ro, /proc/sys ro mount, sysrq-trigger refused" "$obs"
}

# every mount point is declared (mounts, protected) or one the engine makes
# _p_hostnode MP ROOT FSTYPE -- a rootless engine's device node: it cannot mknod in its user
# namespace, so it binds the host's own /dev/null, zero, full, random, urandom, tty (devtmpfs, the
# node of that same name), and masks /proc paths with its /dev/null. Only with userns=remapped.
_p_hostnode() {
	[ "$A_userns" = remapped ] && [ "$3" = devtmpfs ] || return 1
	case $1 in
	/dev/null | /dev/zero | /dev/full | /dev/random | /dev/urandom | /dev/tty) [ "$2" = "/${1#/dev/}" ] ;;
	/proc/*) [ "$2" = /null ] ;;
	*) return 1 ;;
	esac
}

check_mounts_inventory() {
	local ok=0 undecl= ln mm root mp fst known
	if [ "$MI_OK" != 1 ]; then _p_line mounts.inventory 0 "$A_mounts" "$MI_ERR"; return; fi
	set -f; IFS=$_P_NL
	for ln in $MI_TABLE; do
		IFS=' '; set -- $ln
		mm=$3 root=$4 mp=$5 fst=$7
		known=0
		case $mp in
		/ | /proc | /dev | /dev/pts | /dev/shm | /dev/mqueue | /sys | /etc/resolv.conf | /etc/hostname | /etc/hosts) known=1 ;;
		/proc/* | /sys/*)
			case $fst in
			proc | sysfs | cgroup | cgroup2) known=1 ;;
			tmpfs) [ "$root" = / ] || { [ "$root" = /null ] && [ "$mm" = "$MI_DEV_MM" ]; } && known=1 ;;
			esac ;;
		esac
		[ "$known" = 1 ] || _p_hostnode "$mp" "$root" "$fst" || _p_in "$mp" "$A_mounts" || _p_in "$mp" "$A_protected" ||
			_p_add undecl "$mp"
	done
	IFS=$_P_IFS; set +f
	[ -z "$undecl" ] && ok=1
	_p_line mounts.inventory "$ok" "$A_mounts" "$undecl"
}

# the mounts with the rw per-mount option, minus the engine's own rw mounts, are exactly the
# declared writable ones
check_mounts_writable() {
	local ok=1 wset= ln mm root mp opts fst eng p
	if [ "$MI_OK" != 1 ]; then _p_line mounts.writable 0 "$A_writable" "$MI_ERR"; return; fi
	set -f; IFS=$_P_NL
	for ln in $MI_TABLE; do
		IFS=' '; set -- $ln
		mm=$3 root=$4 mp=$5 opts=$6 fst=$7
		case ",$opts," in *,rw,*) ;; *) continue ;; esac
		eng=0
		case $mp in
		/proc | /dev | /dev/pts | /dev/shm | /dev/mqueue | /etc/resolv.conf | /etc/hostname | /etc/hosts) eng=1 ;;
		/proc/*) [ "$root" = /null ] && [ "$mm" = "$MI_DEV_MM" ] && eng=1 ;;
		/sys/fs/cgroup) [ "$fst" = tmpfs ] && eng=1 ;;   # cgroup v1: root-owned 0555 tmpfs
		esac
		[ "$eng" = 1 ] || _p_hostnode "$mp" "$root" "$fst" || _p_add wset "$mp"
	done
	IFS=,
	for p in $wset; do _p_in "$p" "$A_writable" || ok=0; done
	for p in $A_writable; do _p_in "$p" "$wset" || ok=0; done
	IFS=$_P_IFS; set +f
	_p_line mounts.writable "$ok" "$A_writable" "$wset"
}

# exactly one bind mount at the workspace, its root a suffix of the host real path; in copy mode
# (wsupper set) exactly one overlay there instead, its one lower layer the copy (a path ending in
# wsroot) and its upper layer the changes (ending in wsupper): the host tree is not mounted at all
check_mounts_workspace() {
	local ok=1 n=0 fst= root= sopts= lower= upper= o ln
	if [ "$A_workspace" = - ]; then _p_line mounts.workspace 2 - "no workspace"; return; fi
	if [ "$MI_OK" != 1 ]; then _p_line mounts.workspace 0 "$A_workspace <- $A_wsroot" "$MI_ERR"; return; fi
	set -f; IFS=$_P_NL
	for ln in $MI_TABLE; do
		IFS=' '; set -- $ln
		[ "$5" = "$A_workspace" ] || continue
		n=$((n + 1)); root=$4 fst=$7 sopts=$8
	done
	IFS=$_P_IFS; set +f
	[ "$n" = 1 ] || ok=0
	if [ "$A_wsupper" != - ] && ! _p_gvisor; then
		set -f; IFS=,
		for o in $sopts; do
			case $o in lowerdir=*) lower=${o#lowerdir=} ;; upperdir=*) upper=${o#upperdir=} ;; esac
		done
		IFS=$_P_IFS; set +f
		[ "$fst" = overlay ] && [ "$root" = / ] || ok=0
		case $lower in '' | *:*) ok=0 ;; *"$A_wsroot") ;; *) ok=0 ;; esac
		case $upper in '' | *:*) ok=0 ;; *"$A_wsupper") ;; *) ok=0 ;; esac
		_p_line mounts.workspace "$ok" "1 overlay at $A_workspace <- $A_wsroot + $A_wsupper" \
			"$n at $A_workspace, $fst <- ${lower:--} + ${upper:--}"
		return
	fi
	if _p_gvisor; then
		# gVisor serves every bind and volume through its file proxy (9p): the host path is not
		# visible inside, the launcher compares it outside (docker inspect Mounts)
		# visible, and n/a where the plan says so: what is visible must hold
		[ "$fst" = 9p ] && [ "$root" = / ] || ok=0
		[ "$ok" = 1 ] && ok=2
		_p_line mounts.workspace "$ok" "1 9p (gvisor) at $A_workspace" "$n at $A_workspace, $fst <- $root; source not shown (gvisor)"
		return
	fi
	# a Pod's claim whose node path the launcher does not know (wsroot /): one mount there, its
	# source unseen; n/a where the plan says so (the Pod spec names the claim)
	if [ "$A_wsroot" = / ] && _p_in mounts.workspace "$A_na"; then
		case $fst in overlay | aufs | proc | sysfs | devpts | mqueue | cgroup | cgroup2 | '') ok=0 ;; esac
		[ "$ok" = 1 ] && ok=2
		_p_line mounts.workspace "$ok" "1 mount at $A_workspace" "$n at $A_workspace, $fst <- $root; source unknown to the plan"
		return
	fi
	case $fst in
	overlay | aufs | proc | sysfs | devpts | mqueue | cgroup | cgroup2 | '') ok=0 ;;
	tmpfs | ramfs) [ "$root" != / ] || ok=0 ;;   # a bind of a host tmpfs dir is fine
	esac
	case $root in /*) ;; *) ok=0 ;; esac
	case $A_wsroot in *"$root") ;; *) ok=0 ;; esac
	_p_line mounts.workspace "$ok" "1 bind at $A_workspace <- $A_wsroot" \
		"$n at $A_workspace, $fst <- $root"
}

# the agent's uid can read and search the workspace root, and write it when it is writable: a
# workspace owned by someone else otherwise passes every other check and the agent then cannot
# do its work. busybox test judges the mode bits for this uid and its groups (ACLs unseen); the
# listing is a real read, so a refusal the mode bits miss still fails. Nothing is created in
# the workspace. Owner and mode are reported for the launcher's hint.
check_ws_access() {
	local ok=1 obs= need=read,search d st
	if [ "$A_workspace" = - ]; then _p_line ws.access 2 - "no workspace"; return; fi
	_p_dec "$A_workspace"; d=$_P_R
	[ -d "$d" ] || { ok=0; obs="notdir"; }
	if [ -r "$d" ]; then _p_add obs r=yes; else ok=0; _p_add obs r=no; fi
	if [ -x "$d" ]; then _p_add obs x=yes; else ok=0; _p_add obs x=no; fi
	if _p_in "$A_workspace" "$A_writable"; then
		need=$need,write
		if [ -w "$d" ]; then _p_add obs w=yes; else ok=0; _p_add obs w=no; fi
	fi
	if "$BB" ls -a -- "$d" >/dev/null 2>&1 </dev/null; then _p_add obs list=ok; else ok=0; _p_add obs list=refused; fi
	st=$("$BB" stat -c 'owner=%u,group=%g,mode=%a' -- "$d" 2>/dev/null </dev/null) || { ok=0; st=stat=failed; }
	_p_line ws.access "$ok" "uid $A_uid can $need $A_workspace" "$obs,$st"
}

# the agent's home is exactly one mount at its point, of the planned source: a fresh tmpfs mounted
# for the agent's uid:gid (root /, superopts uid= and gid= the agent's), or the workspace's own home
# volume (mountinfo root ending in homesrc, /NAME/_data); its root directory is owned by the agent's
# uid:gid and has no group or other permission bits. Writability is mounts.writable's; that /home
# itself stays read-only is fs.rofs's.
check_home_private() {
	local ok=1 n=0 fst= root= sopts= ln d st m o u= g=
	if [ "$MI_OK" != 1 ]; then _p_line home.private 0 "$A_home <- $A_homesrc" "$MI_ERR"; return; fi
	set -f; IFS=$_P_NL
	for ln in $MI_TABLE; do
		IFS=' '; set -- $ln
		[ "$5" = "$A_home" ] || continue
		n=$((n + 1)); root=$4 fst=$7 sopts=$8
	done
	IFS=$_P_IFS; set +f
	[ "$n" = 1 ] || ok=0
	if [ "$A_homesrc" = tmpfs ]; then
		set -f; IFS=,
		for o in $sopts; do
			case $o in uid=*) u=${o#uid=} ;; gid=*) g=${o#gid=} ;; esac
		done
		IFS=$_P_IFS; set +f
		[ "$fst" = tmpfs ] && [ "$root" = / ] && [ "$u" = "$A_uid" ] && [ "$g" = "$A_gid" ] || ok=0
	else
		case $fst in overlay | aufs | tmpfs | ramfs | proc | sysfs | devpts | mqueue | cgroup | cgroup2 | '') ok=0 ;; esac
		case $root in *"$A_homesrc") ;; *) ok=0 ;; esac
	fi
	_p_dec "$A_home"; d=$_P_R
	st=$("$BB" stat -c '%u:%g %a' -- "$d" 2>/dev/null </dev/null) || { ok=0; st="- -"; }
	case $st in
	"$A_uid:$A_gid "*) ;;
	*) ok=0 ;;
	esac
	m=${st##* }
	case ${m#"${m%??}"} in 00) ;; *) ok=0 ;; esac   # the mode's last two digits: group, other
	_p_line home.private "$ok" "1 mount at $A_home <- $A_homesrc, owner $A_uid:$A_gid, no group/other bits" \
		"mounts=$n,type=${fst:--},root=${root:--},uid=${u:--},gid=${g:--},owner=${st%% *},mode=${st##* }"
}

# protected paths cannot be written, replaced (renamed away) or created
check_fs_protected() {
	local ok=1 obs= p d pd c n=0 i
	set -f; IFS=,
	for p in $A_protected; do
		IFS=$_P_IFS; set +f
		_p_dec "$p"; d=$_P_R
		if [ -L "$d" ] && ! [ -e "$d" ]; then
			ok=0; _p_add obs "dangling:$p"
		elif [ -d "$d" ] || [ -f "$d" ]; then
			if [ -d "$d" ]; then
				_p_trycreate "$d" && { ok=0; _p_add obs "writable:$p"; }
			elif { true >>"$d"; } 2>/dev/null; then
				ok=0; _p_add obs "writable:$p"
			fi
			# not a mount point: it could be renamed away unless its directory is read-only too
			if ! _p_in "$p" "$MI_POINTS"; then
				pd=${d%/*}; [ -n "$pd" ] || pd=/
				_p_trycreate "$pd" && { ok=0; _p_add obs "replaceable:$p"; }
			fi
		elif [ -e "$d" ]; then
			ok=0; _p_add obs "type:$p"
		elif _p_firstmissing "$d"; then
			# missing: its first missing component must not be creatable (all are tried below)
			n=$((n + 1)); eval "_fp_$n=\$p _fc_$n=\$_P_R"; set -- "$@" "$_P_R"
		else
			ok=0; _p_add obs "notdir-parent:$p"
		fi
		set -f; IFS=,
	done
	IFS=$_P_IFS; set +f
	# One mkdir for every missing component (one fork, not one each): none existed before it, so
	# any that exists after it was creatable. Nothing else runs in the sandbox yet.
	if [ "$n" -gt 0 ]; then
		"$BB" mkdir -- "$@" 2>/dev/null </dev/null
		i=0
		while [ "$i" -lt "$n" ]; do
			i=$((i + 1))
			eval "p=\$_fp_$i c=\$_fc_$i"
			if [ -e "$c" ] || [ -L "$c" ]; then ok=0; _p_add obs "creatable:$p"; fi
		done
		for c in "$@"; do
			if [ -d "$c" ] && ! [ -L "$c" ]; then "$BB" rmdir -- "$c" 2>/dev/null || _p_left "$c"
			elif [ -e "$c" ] || [ -L "$c" ]; then _p_left "$c"; fi
		done
	fi
	_p_line fs.protected "$ok" "$A_protected" "$obs"
}

# no socket file on any mount. Kernel filesystems hold no socket files: pruned. The image's
# root (read-only overlay) cannot hold one either: image layers cannot carry sockets and its
# upper layer is read-only. Every other mount is walked once: as a start point when the mount
# it sits on is not walked, else through that one. One find for all of them. owntmpfs (given only
# when a running sandbox is proven again): its planned tmpfs mounts, pruned as the kernel's are,
# since a socket there now was made inside (the engine made them empty; mounts never change).
check_sockets_mounts() {
	local ok=1 obs= walk= walked= kern= wk=' ' ln id par mp opts fst p q o rc denied
	if [ "$MI_OK" != 1 ]; then _p_line sockets.mounts 0 "no socket" "$MI_ERR"; return; fi
	set -f; IFS=$_P_NL
	for ln in $MI_TABLE; do
		IFS=' '; set -- $ln
		id=$1 par=$2 mp=$5 opts=$6 fst=$7
		if [ "$fst" = tmpfs ] && _p_in "$mp" "${A_owntmpfs-}"; then _p_add kern "$mp"; continue; fi
		case $fst in
		proc | sysfs | cgroup | cgroup2 | devpts | mqueue | securityfs | debugfs | tracefs | \
			pstore | bpf | configfs | fusectl | binfmt_misc | hugetlbfs)
			_p_add kern "$mp" ;;
		*)
			if [ "$mp" = / ] && [ "$fst" = overlay ] && _p_in ro "$opts"; then :; else
				_p_add walked "$mp"
				case $wk in *" $par "*) ;; *) _p_add walk "$mp" ;; esac
				wk="$wk$id "
			fi ;;
		esac
	done
	IFS=$_P_IFS; set +f
	set --
	set -f; IFS=,
	for p in $walk; do _p_dec "$p"; set -- "$@" "$_P_R"; done
	if [ "$#" -gt 0 ]; then
		set -- "$@" \( -path /proc -o -path /sys
		for p in $kern; do
			_p_in "$p" "$walked" && continue
			_p_dec "$p"
			q=${_P_R//\\/\\\\}; q=${q//\*/\\*}; q=${q//\?/\\?}; q=${q//\[/\\[}
			set -- "$@" -o -path "$q"
		done
		IFS=$_P_IFS; set +f
		o=$("$BB" find "$@" \) -prune -o -type s -print 2>&1 </dev/null)
		rc=$?
		denied=0
		set -f; IFS=$_P_NL
		for ln in $o; do
			case $ln in
			"find: "*": Permission denied") denied=1 ;;
			"find: "*) ok=0; _p_esc "${ln#find: }"; _p_add obs "error:$_P_R" ;;
			*) ok=0; _p_esc "$ln"; _p_add obs "$_P_R" ;;
			esac
		done
		# a non-zero exit must be explained by permission errors only
		if [ "$rc" != 0 ] && [ "$denied" = 0 ] && [ "$ok" = 1 ]; then ok=0; obs="find failed"; fi
	fi
	IFS=$_P_IFS; set +f
	_p_line sockets.mounts "$ok" "no socket" "$obs"
}

# no runtime socket path exists (any type)
check_sockets_runtime() {
	local ok=1 obs= pat p
	set -f; IFS=,
	for pat in $A_runtimesockets; do
		IFS=$_P_IFS; set +f
		_p_dec "$pat"
		for p in $_P_R; do   # a glob (/run/user/*/docker.sock): expanded here, on purpose
			if [ -e "$p" ] || [ -L "$p" ]; then ok=0; _p_esc "$p"; _p_add obs "$_P_R"; fi
		done
		set -f; IFS=,
	done
	IFS=$_P_IFS; set +f
	_p_line sockets.runtime "$ok" "none" "$obs"
}

# _p_matches STRING LIST -- true when STRING matches one of the newline-separated globs in LIST
# (the launcher's lists, decoded once by gather_lists)
_p_matches() {
	local pat
	set -f; IFS=$_P_NL
	for pat in $2; do
		IFS=$_P_IFS
		case $1 in $pat) set +f; return 0 ;; esac
		IFS=$_P_NL
	done
	IFS=$_P_IFS; set +f
	return 1
}

# no secret-shaped name or value in any readable environment (names reported, never values)
check_env_secrets() {
	local ok=0 sec= i=0 e n v
	while [ "$i" -lt "$ENV_N" ]; do
		i=$((i + 1))
		eval "e=\$ENV_$i"
		n=${e%%=*}
		case $e in *=*) v=${e#*=} ;; *) v= ;; esac
		# a key bound to its destination: its variable with exactly its placeholder (keyvars)
		case "$_P_NL$L_KEYVARS" in *"$_P_NL$e$_P_NL"*) continue ;; esac
		# the launcher's own lists (launcher/secrets.py), names in any letter case
		if _p_matches "$n" "$L_SECRETNAMES" || _p_matches "$v" "$L_SECRETVALUES"; then
			_p_esc "$n"; _p_add sec "$_P_R"
		fi
	done
	[ -z "$sec" ] && ok=1
	_p_line env.secrets "$ok" "no secret-shaped variable" "$sec"
}

# no container-runtime endpoint in any readable environment, no ~/.docker/config.json
check_env_runtime() {
	local ok=0 rt= i=0 e
	while [ "$i" -lt "$ENV_N" ]; do
		i=$((i + 1))
		eval "e=\$ENV_$i"
		_p_matches "${e%%=*}" "$L_RUNTIMENAMES" && _p_add rt "${e%%=*}"
	done
	if [ -n "$HOME" ]; then
		_p_slash "$HOME"
		if [ -e "$_P_R.docker/config.json" ] || [ -L "$_P_R.docker/config.json" ]; then
			_p_esc "$_P_R.docker/config.json"; _p_add rt "$_P_R"
		fi
	fi
	[ -z "$rt" ] && ok=1
	_p_line env.runtime "$ok" "no runtime endpoint" "$rt"
}

# no credential files in $HOME, no /run/secrets, no credentials in the workspace's git remotes
check_creds_files() {
	local ok=1 obs= h ln p f u
	set --
	if [ -n "$HOME" ]; then
		_p_slash "$HOME"; h=$_P_R
		set -f; IFS=,
		for p in $A_credpaths; do   # launcher/paths.py; .npmrc counts only with an auth entry
			IFS=$_P_IFS; _p_dec "$p"
			[ "$_P_R" = .npmrc ] || set -- "$@" "$h$_P_R"
			IFS=,
		done
		IFS=$_P_IFS; set +f
		if _p_in .npmrc "$A_credpaths" && [ -f "$h.npmrc" ]; then
			{ while IFS= read -r ln; do
				case $ln in *_[Aa][Uu][Tt][Hh]*) ok=0; _p_esc "$h.npmrc"; _p_add obs "$_P_R" ;; esac
			done <"$h.npmrc"; } 2>/dev/null
		fi
	fi
	set -- "$@" /run/secrets
	for p in "$@"; do
		if [ -e "$p" ] || [ -L "$p" ]; then ok=0; _p_esc "$p"; _p_add obs "$_P_R"; fi
	done
	if [ "$A_workspace" != - ]; then
		_p_dec "$A_workspace"; _p_slash "$_P_R"; f="$_P_R.git/config"
		if [ -f "$f" ]; then
			{ while IFS= read -r ln; do
				case $ln in
				*[Uu][Rr][Ll]*=*://*)
					u=${ln#*://}; u=${u%%/*}
					case $u in
					*:*@*) ok=0; _p_add obs "$A_workspace/.git/config:url-credentials" ;;
					*@*) case $ln in *[Hh][Tt][Tt][Pp]://* | *[Hh][Tt][Tt][Pp][Ss]://*)
						ok=0; _p_add obs "$A_workspace/.git/config:url-credentials" ;; esac ;;
					esac ;;
				esac
			done <"$f"; } 2>/dev/null
		fi
	fi
	_p_line creds.files "$ok" "none" "$obs"
}

# none -> only lo; proxy -> lo and exactly one interface (the internal network); pod, podproxy
# -> lo and at most one interface (the network plugin's; pod.reach proves where it leads)
check_net_interfaces() {
	local ok=1 obs= nif=0 p n
	for p in /sys/class/net/* /sys/class/net/.[!.]*; do
		[ -e "$p" ] || [ -L "$p" ] || continue   # an unmatched pattern stays literal
		n=${p##*/}
		_p_esc "$n"; _p_add obs "$_P_R"
		[ "$n" = lo ] || nif=$((nif + 1))
	done
	_p_in lo "$obs" || ok=0
	case $A_net in
	proxy)
		[ "$nif" = 1 ] || ok=0
		_p_line net.interfaces "$ok" "lo and one interface" "$obs" ;;
	pod | podproxy)
		[ "$nif" -le 1 ] || ok=0
		_p_line net.interfaces "$ok" "lo and at most one interface" "$obs" ;;
	*)
		[ "$nif" = 0 ] || ok=0
		_p_line net.interfaces "$ok" lo "$obs" ;;
	esac
}

# none -> no IPv4 route at all; proxy, pod, podproxy -> IPv4 routes only through one interface.
# IPv6: none and proxy -> no address or route beyond lo (IPv6 has no way out); pod, podproxy ->
# beyond lo only link-local ones (fe80::/10 addresses of scope link, fe80:: and multicast ff00::/8
# routes), which the kernel gives every interface and which lead nowhere beyond the link.
check_net_routes() {
	local ok=1 obs= f ln n pod=0
	case $A_net in pod | podproxy) pod=1 ;; esac
	if [ "$RT_OK" = 1 ]; then
		[ "$RT_N" -ge 0 ] || { ok=0; obs="route: empty"; }
		if [ "$A_net" = none ]; then
			[ "$RT_N" -le 0 ] || { ok=0; _p_add obs "ipv4 routes: $RT_N"; }
		else
			case $RT_DEVS in *,*) ok=0; _p_add obs "ipv4 routes via $RT_DEVS" ;; esac
		fi
	else ok=0; obs="route: unreadable"; fi
	for f in /proc/net/if_inet6 /proc/net/ipv6_route; do
		[ -e "$f" ] || continue
		{ while IFS=' ' read -r ln; do
			set -f; set -- $ln; set +f
			[ "$#" -gt 0 ] || continue
			eval "n=\${$#}"
			[ "$n" != lo ] || continue
			if [ "$pod" = 1 ]; then
				case $f:$1:$4 in
				*/if_inet6:fe[89ab]?????????????????????????????:20) continue ;;    # scope link
				*/ipv6_route:fe80000000000000????????????????:* | */ipv6_route:ff??????????????????????????????:*) continue ;;
				esac
			fi
			ok=0; _p_add obs "${f##*/}:$n"
		done <"$f"; } 2>/dev/null || { ok=0; _p_add obs "${f##*/}: unreadable"; }
	done
	case $A_net in
	proxy) _p_line net.routes "$ok" "ipv4 via one interface, no ipv6" "$obs" ;;
	pod | podproxy) _p_line net.routes "$ok" "ipv4 via one interface, ipv6 link-local only" "$obs" ;;
	*) _p_line net.routes "$ok" "none beyond lo" "$obs" ;;
	esac
}

# egress.*: proxy mode only (see run_checks); they judge what gather_egress observed

# _p_unreported ID KEY -- true (and a failed line for ID) if observation KEY did not report
_p_unreported() {
	_p_in "$2" "$EG_REPORTED" && return 1
	_p_line "$1" 0 "a result" "the check did not report"
	return 0
}

# the proxy answers at the address the sandbox was given
check_egress_proxy() {
	_p_unreported egress.proxy proxy && return
	case $EG_PROXY in
	HTTP/1.[01]\ *) _p_line egress.proxy 1 "$A_proxy answers" "$EG_PROXY" ;;
	*) _p_line egress.proxy 0 "$A_proxy answers" "${EG_PROXY:-no answer}" ;;
	esac
}

# a name outside the allow-list gets 403 from the proxy
check_egress_denied() {
	_p_unreported egress.denied proxy && return
	case $EG_PROXY in
	HTTP/1.[01]\ 403*) _p_line egress.denied 1 "403 for $A_denyhost" "$EG_PROXY" ;;
	*) _p_line egress.denied 0 "403 for $A_denyhost" "${EG_PROXY:-no answer}" ;;
	esac
}

# A direct connection to the gateway (the host's side of the network) must not get through. A
# refused connection proves the host is reachable, so only a timeout or "no route" passes, on
# every port (unsettled or unknown fails too). No address to try is no observation: it fails (the
# launcher's networks always leave one: a /28 has 12 besides the sandbox's and the proxy's).
check_egress_direct() {
	local ok=1 _i
	if [ -z "$EG_GW_IP" ]; then _p_line egress.direct 0 "no path to the host" "nothing to try: $EG_NOGW"; return; fi
	_p_unreported egress.direct direct && return
	[ -n "${EG_DIRECT# }" ] || ok=0
	set -f
	for _i in $EG_DIRECT; do
		case $_i in *:blocked) ;; *) ok=0 ;; esac
	done
	set +f
	_p_line egress.direct "$ok" "no path to the host via $EG_GW_IP" "${EG_DIRECT# }"
}

# only the planned resolver on the sandbox's loopback, and it must not resolve a name only the proxy
# may reach (_p_lookup): on podman 127.0.0.1, where nothing answers; Docker's embedded one
# (127.0.0.11) must be seen forwarding it to the sandbox's own 127.0.0.1:53, where nothing answers
check_egress_dns() {
	local ok=1 obs= ns pass="no answer within *"
	for ns in $("$BB" awk '$1 == "nameserver" { print $2 }' /etc/resolv.conf 2>/dev/null); do
		[ "$ns" = "$A_resolver" ] || { ok=0; obs="$obs nameserver:$ns"; }
	done
	! _p_relays || pass="relayed to the sandbox's own 127.0.0.1:53"
	if [ "$A_dnsname" != - ]; then
		_p_unreported egress.dns dns && return
		case $EG_DNS in $pass) obs="$obs $A_dnsname:$EG_DNS" ;; *) ok=0; obs="$obs $A_dnsname:$EG_DNS" ;; esac
	fi
	_p_line egress.dns "$ok" "no outside name resolves ($A_dnsname)" "${obs# }"
}

# rules per request (only when the plan has http: rules): the proxy answers a CONNECT to an
# intercepted host with a certificate from this sandbox's own CA
check_egress_bump_ca() {
	local own
	_p_unreported egress.bump_ca bump && return
	own=$(_p_own_ca)
	case $EG_BUMP in
	"HTTP/1."[01]" 200;$own;"*) [ -n "$own" ] && _p_line egress.bump_ca 1 "a certificate of $own for $A_bump" "$EG_BUMP" && return ;;
	esac
	_p_line egress.bump_ca 0 "a certificate of ${own:-this sandbox's CA (none in $A_bumpca)} for $A_bump" "${EG_BUMP:-no answer}"
}

# a method and a path that no rule allows are refused by the proxy itself: 403 and its own page
check_egress_http_refused() {
	local ok=1 _i
	_p_unreported egress.http_refused refuse && return
	set -f
	IFS=,
	for _i in $A_refuse; do
		case " $EG_REFUSE" in *" $_i=HTTP/1."[01]" 403;refused by the egress policy; "*) ;; *) ok=0 ;; esac
	done
	IFS=$_P_IFS; set +f
	_p_line egress.http_refused "$ok" "403 from the proxy for $A_refuse" "${EG_REFUSE% }"
}

# a host without http: rules stays a plain tunnel: no certificate of this sandbox's CA for it
check_egress_tunnel() {
	_p_unreported egress.tunnel tunnel && return
	case $EG_TUNNEL in
	*"sandbox egress CA"*) _p_line egress.tunnel 0 "a tunnel to $A_tunnel, nothing decrypted" "$EG_TUNNEL" ;;
	"HTTP/1."[01]" 200;"*) _p_line egress.tunnel 1 "a tunnel to $A_tunnel, nothing decrypted" "$EG_TUNNEL" ;;
	*) _p_line egress.tunnel 0 "a tunnel to $A_tunnel, nothing decrypted" "${EG_TUNNEL:-no answer}" ;;
	esac
}

# a bound key's placeholder sent to another allowed destination is refused by the proxy's key helper
check_egress_key_refused() {
	_p_unreported egress.key_refused keyrefuse && return
	case $EG_KEY in
	"HTTP/1."[01]" 403;refused by the egress policy: placeholder of;") _p_line egress.key_refused 1 \
		"403 from the proxy for a placeholder sent to ${A_keyrefuse#*@}" "$EG_KEY" ;;
	*) _p_line egress.key_refused 0 "403 from the proxy for a placeholder sent to ${A_keyrefuse#*@}" "${EG_KEY:-no answer}" ;;
	esac
}

# a bound key's placeholder in a header only the key ICAP service sees is refused by that service
check_egress_key_hidden() {
	_p_unreported egress.key_hidden keyhidden && return
	case $EG_KEYHIDDEN in
	"HTTP/1."[01]" 403;refused by the egress policy: placeholder of;") _p_line egress.key_hidden 1 \
		"403 from the proxy for a placeholder in any header, to ${A_keyhidden#*@}" "$EG_KEYHIDDEN" ;;
	*) _p_line egress.key_hidden 0 "403 from the proxy for a placeholder in any header, to ${A_keyhidden#*@}" \
		"${EG_KEYHIDDEN:-no answer}" ;;
	esac
}

# pod.*: pod and podproxy modes only (see run_checks); they judge what gather_reach observed.
# _p_unobserved ID KEY -- true (and a failed line for ID) if observation KEY of gather_reach did
# not report
_p_unobserved() {
	_p_in "$2" "$RC_REPORTED" && return 1
	_p_line "$1" 0 "a result" "the check did not report"
	return 0
}

# _p_silence_ok -- true when silence is a drop here: the control answered in the same window
_p_silence_ok() {
	case $RC_CONTROL in proxy:connected | gateway:answered) return 0 ;; esac
	return 1
}

# Nothing the policy forbids answers: every forbidden address, the gateway's and the node's ports,
# the API server's Service and the nameservers are refused, have no route, or stay silent while
# the control answered (a silent target without it could be a slow open path: fails).
check_pod_reach() {
	local ok=1 silent=0 obs _i
	_p_unobserved pod.reach reach && return
	_p_unobserved pod.reach control && return
	set -f
	for _i in $RC_REACH; do
		case $_i in *:refused | *:noroute) ;; *:silent) silent=1 ;; *) ok=0 ;; esac
	done
	set +f
	obs="$RC_REACH; control $RC_CONTROL"
	if [ "$silent" = 1 ] && ! _p_silence_ok; then ok=0; obs="$obs (silence without an answering control)"; fi
	_p_line pod.reach "$ok" "nothing but the policy's path answers" "$obs"
}

# No resolver answers: neither the nameservers of /etc/resolv.conf nor the cluster DNS addresses
# among the forbidden ones (any reply, NXDOMAIN too, fails); silence needs the control as above.
check_pod_dns() {
	local ok=1 silent=0 _i
	_p_unobserved pod.dns dns && return
	set -f
	for _i in $RC_DNS; do
		case $_i in *:refused | *:noroute) ;; *:silent) silent=1 ;; *) ok=0 ;; esac
	done
	set +f
	[ "$silent" = 0 ] || _p_silence_ok || ok=0
	_p_line pod.dns "$ok" "no resolver answers" "${RC_DNS:-no nameserver}; control $RC_CONTROL"
}

# cgroup pids limit (v1 or v2) equals the plan
check_limits_pids() {
	local ok=0 v=
	if _p_gvisor && ! [ -e "$CG_PIDS" ] && ! [ -e /sys/fs/cgroup/pids.max ]; then
		# gVisor mounts no cgroupfs: the limit holds the whole sandbox on the host (its threads,
		# not the agent's processes); n/a where the plan says so (docker inspect PidsLimit)
		_p_line limits.pids 2 "$A_pids" "no cgroup file inside (gvisor)"
		return
	fi
	{ read -r v <"$CG_PIDS"; } 2>/dev/null
	[ -n "$v" ] && [ "$v" = "$A_pids" ] && ok=1
	# pids=max (a Pod's: no pids limit of its own, the node's podPidsLimit or none) is no limit to
	# prove: n/a with the value seen where the plan says so, else a fail, never a pass
	[ "$A_pids" = max ] && { ok=0; _p_in limits.pids "$A_na" && ok=2; }
	_p_line limits.pids "$ok" "$A_pids" "${v:-unreadable:$CG_PIDS}"
}

# cgroup memory limit equals the plan; v1's "no limit" is a huge number, read as max
check_limits_memory() {
	local ok=0 v= ln
	if _p_gvisor; then
		# gVisor sizes its memory to the container's limit: MemTotal (kB) is the limit
		{ while IFS= read -r ln; do
			case $ln in MemTotal:*) set -f; set -- $ln; set +f; v=$(($2 * 1024)); break ;; esac
		done </proc/meminfo; } 2>/dev/null
		[ -n "$v" ] && [ "$v" = "$A_mem" ] && ok=1
		_p_line limits.memory "$ok" "$A_mem" "MemTotal(gvisor)=${v:-unreadable}"
		return
	fi
	{ read -r v <"$CG_MEM"; } 2>/dev/null
	case $v in
	'' | max) ;;
	*[!0-9]*) ;;
	*) if [ "${#v}" -gt 19 ] || [ "$v" -ge 4611686018427387904 ]; then v=max; fi ;;
	esac
	[ -n "$v" ] && [ "$v" = "$A_mem" ] && ok=1
	_p_line limits.memory "$ok" "$A_mem" "${v:-unreadable:$CG_MEM}"
}

# PID 1 is this probe (own PID namespace), and only a handful of processes
check_proc_pid1() {
	local ok=0 x np=0 p
	x=$("$BB" readlink /proc/1/exe 2>/dev/null </dev/null)
	# gVisor refuses readlink of /proc/1/exe to a process that is not PID 1 itself (this
	# check runs in a subshell): PID 1's argv[0] then, set by the engine from the entrypoint
	if [ -z "$x" ] && _p_gvisor; then
		x=$("$BB" tr '\0' '\n' </proc/1/cmdline 2>/dev/null | "$BB" head -n 1)
	fi
	for p in /proc/[0-9]*; do np=$((np + 1)); done
	[ "$x" = "$BB" ] && [ "$np" -lt 50 ] && ok=1
	_p_line proc.pid1 "$ok" "exe=$BB procs<50" "exe=${x:-unreadable} procs=$np"
}

# only the engine's standard entries in /dev; no block device; char devices only the standard
# ones and pty slaves
check_dev_nodes() {
	local ok=1 obs= p o rc ln
	for p in /dev/* /dev/.[!.]* /dev/..?*; do
		[ -e "$p" ] || [ -L "$p" ] || continue
		case ${p#/dev/} in
		null | zero | full | random | urandom | tty | console | ptmx | pts | shm | mqueue | fd | \
			stdin | stdout | stderr | core) ;;
		fuse | net) _p_gvisor || { ok=0; _p_add obs "$p"; } ;;   # gVisor's own, emulated: no host device behind
		*) ok=0; _p_esc "$p"; _p_add obs "$_P_R" ;;
		esac
	done
	o=$("$BB" find /dev \( -type b -o -type c \) -print 2>&1 </dev/null)
	rc=$?
	set -f; IFS=$_P_NL
	for ln in $o; do
		case $ln in
		/dev/null | /dev/zero | /dev/full | /dev/random | /dev/urandom | /dev/tty | /dev/console | \
			/dev/pts/ptmx) [ -b "$ln" ] && { ok=0; _p_add obs "block:$ln"; } ;;
		/dev/pts/[0-9]*) case ${ln#/dev/pts/} in *[!0-9]*) ok=0; _p_esc "$ln"; _p_add obs "$_P_R" ;; esac ;;
		/dev/fuse | /dev/net/tun) _p_gvisor && [ ! -b "$ln" ] || { ok=0; _p_add obs "$ln"; } ;;
		"find: "*) ok=0; _p_esc "$ln"; _p_add obs "error:$_P_R" ;;
		*) ok=0; _p_esc "$ln"; _p_add obs "$_P_R" ;;
		esac
	done
	IFS=$_P_IFS; set +f
	[ "$rc" = 0 ] || ok=0
	_p_line dev.nodes "$ok" "standard nodes only" "$obs"
}

# =============================================================================================
# 5. run

run_checks() {
	local id n
	# The checks, in report order, as the launcher lists them (launcher/checks.py): it passes the
	# ones for this sandbox's mode and requires a line for each.
	set -f; IFS=,
	for id in $A_checks; do
		IFS=$_P_IFS; set +f
		n=$_P_N
		"check_${id//./_}"
		# every check reports exactly once; one that did not (or a missing function) fails
		[ "$_P_N" != "$n" ] || _p_line "$id" 0 "a result" "the check did not report"
		set -f; IFS=,
	done
	IFS=$_P_IFS; set +f
}

_p_main() {
	BB=/.sandbox/probe/busybox
	PATH=/dev/null   # not a directory: no lookup finds anything (see the header)
	_P_TAB='	'
	_P_NL='
'
	_P_CR=$(printf '\r')
	IFS=" $_P_TAB$_P_NL"
	_P_IFS=$IFS
	readonly BB _P_TAB _P_NL _P_CR _P_IFS
	set -C          # noclobber: ">" never truncates, it creates with O_EXCL
	_P_N=0          # lines reported (see _p_line)
	_P_FAILED=0
	_P_LEFT=        # probe files that could not be removed (see _p_left)
	_P_WORD=${__sbx_probe_w-}   # seconds to wait on fd 3 for the launcher's word that the proxy is ready (or empty)
	readonly _P_WORD

	parse_args "$@"

	gather_status
	gather_mountinfo
	gather_routes
	gather_kernel
	gather_cgroup
	gather_lists
	gather_environ
	case $A_net in proxy | podproxy) gather_egress ;; esac
	case $A_net in pod | podproxy) gather_reach ;; esac

	run_checks

	if [ -n "$_P_LEFT" ]; then
		_p_line cleanup 0 "nothing left behind" "$_P_LEFT"
	fi
	if [ "$_P_FAILED" = 0 ]; then
		printf 'PROBE-END\tok\t%s\n' "$_P_N"
		exit 0
	fi
	printf 'PROBE-END\tfail\t%s\n' "$_P_N"
	exit 97
}

# =============================================================================================
# 5. run, in its process: phases 2-5 run in a subshell (nothing they assign reaches the agent), in
# the background, so that PID 1 runs a trapped signal's action while they run (while it waits for a
# foreground command, ash runs traps only once the command has ended). In proxy mode with a
# launcher watching (net=proxy, gate=N) the launcher starts the sandbox alongside its proxy, before
# the proxy runs: the probe asks (a "PROBE-ASK<TAB>proxy" line, printed once the TERM trap is set)
# for the launcher's word that the proxy is ready, and the launcher answers with a line on this
# process's stdin, which the checks' subshell gets as fd 3 (its stdin is /dev/null) and
# _p_ask_proxy reads, one line, before it asks. PID 1 itself reads nothing until the gate, whose
# "go" the launcher writes only after the whole report, so the two lines cannot be taken one for the
# other (and a first line the checks never took is read by the gate: not "go", so no agent). The
# word only says when to ask the proxy and when its 15 s begin: a word that never comes ends with
# read's bound (twice the gate, more than the launcher waits for its proxy). The launcher's no
# (SIGTERM, e.g. its proxy never started) ends the checks at once: exit 97. Assigns only
# __sbx_probe_* names and unsets them again.

__sbx_probe_checks() {
	__sbx_probe_w= __sbx_probe_n= __sbx_probe_g=-
	for __sbx_probe_a; do
		case $__sbx_probe_a in --) break ;; gate=*) __sbx_probe_g=${__sbx_probe_a#gate=} ;; net=*) __sbx_probe_n=${__sbx_probe_a#net=} ;; esac
	done
	case $__sbx_probe_n:$__sbx_probe_g in
	proxy:- | proxy:*[!0-9]* | proxy:) ;;   # a bad gate= fails in parse_args
	proxy:*)
		__sbx_probe_w=$((__sbx_probe_g * 2))
		printf 'PROBE-ASK\tproxy\n'
		;;
	esac
	# fd 3 from PID 1's own: ash gives a command put in the background /dev/null as its stdin before
	# that command's own redirections, so `3<&0` there would copy /dev/null
	[ -z "$__sbx_probe_w" ] || exec 3<&0
	(_p_main "$@") </dev/null &
	__sbx_probe_m=$!
	[ -z "$__sbx_probe_w" ] || exec 3<&-   # PID 1 keeps no copy: the agent never holds one
	while :; do
		wait "$__sbx_probe_m"
		__sbx_probe_s=$?
		if [ "${__sbx_probe_go-}" = no ]; then
			/.sandbox/probe/busybox kill "$__sbx_probe_m" 2>/dev/null
			printf 'probe: the launcher said no while the checks ran: the agent was not started\n' >&2
			exit 97
		fi
		# wait returned early (128 + the signal) for a trapped signal while the subshell still runs
		[ -e "/proc/$__sbx_probe_m" ] || break
	done
	# ... or right as it ended: its status is kept until asked for again (a failed one is no pass)
	[ "$__sbx_probe_s" -le 128 ] || { wait "$__sbx_probe_m"; __sbx_probe_s=$?; }
	[ "$__sbx_probe_s" = 0 ] || exit 97
	unset __sbx_probe_a __sbx_probe_g __sbx_probe_m __sbx_probe_n __sbx_probe_s __sbx_probe_w
}

# =============================================================================================
# 6. gate: the launcher's word. The probe's own verdict is not the last one: the launcher reads
# the whole report, compares it with its plan (the check list, the order) and only then writes
# "go" on this process's stdin, which only the launcher holds (the container's stdin, open for it,
# attached to the launcher alone); SIGTERM is its no. A pipe keeps a word written before the read
# began, so nothing races it (a signal did: one that came just before the wait was lost until the
# wait's end), and ash's read is a builtin: no process of its own on the word's path. The TERM trap
# is set at the top level, before the checks start, and ends the read at once. gate=- is a
# sandbox with no launcher watching (files for compose, a dev container, a Pod): the probe's own
# verdict decides, and its stdin is left as it is. The agent's stdin is /dev/null, as it was
# before the word came on it. Runs in the probe's own process, so it only assigns __sbx_probe_*
# names and unsets them again.

__sbx_probe_gate() {
	__sbx_probe_g=-
	for __sbx_probe_a; do
		case $__sbx_probe_a in --) break ;; gate=*) __sbx_probe_g=${__sbx_probe_a#gate=} ;; esac
	done
	if [ "$__sbx_probe_g" != - ]; then
		if [ -z "${__sbx_probe_go-}" ] && read -r -t "$__sbx_probe_g" __sbx_probe_word && [ "$__sbx_probe_word" = go ]
		then
			[ -n "${__sbx_probe_go-}" ] || __sbx_probe_go=go   # (a no that came meanwhile stays a no)
		fi
		case ${__sbx_probe_go-} in
		go) ;;
		no)
			printf 'probe: the launcher refused the report: the agent was not started\n' >&2
			exit 97
			;;
		*)
			if [ -n "${__sbx_probe_word-}" ]; then   # (what came is not printed: bytes for a terminal)
				printf 'probe: what came on stdin was not the launcher'"'"'s word: the agent was not started\n' >&2
			else
				printf 'probe: no word from the launcher within %s s (or its stdin ended): the agent was not started\n' "$__sbx_probe_g" >&2
			fi
			exit 97
			;;
		esac
		exec </dev/null
	fi
	trap - TERM
	unset __sbx_probe_a __sbx_probe_g __sbx_probe_go __sbx_probe_word
}

# =============================================================================================
# 7. exec step: runs in the probe's own process, so it must not disturb the environment. Only
# names no environment is expected to carry are assigned, and only after the checks passed.

# resolve a command name like execvp would, without busybox's applet-first lookup
__sbx_probe_resolve() {
	local IFS __sbx_probe_d __sbx_probe_path
	__sbx_probe_cmd=
	__sbx_probe_path=${PATH-/bin:/usr/bin}
	case $__sbx_probe_path in *:) __sbx_probe_path="$__sbx_probe_path:." ;; esac
	IFS=:
	set -f
	for __sbx_probe_d in $__sbx_probe_path; do
		__sbx_probe_d="${__sbx_probe_d:-.}/$1"
		if [ -f "$__sbx_probe_d" ] && [ -x "$__sbx_probe_d" ]; then
			__sbx_probe_cmd=$__sbx_probe_d
			break
		fi
	done
	set +f
}

__sbx_probe_exec() {
	while [ "$#" -gt 0 ]; do
		case $1 in --) shift; break ;; esac
		shift
	done
	if [ "$#" = 0 ]; then exit 97; fi
	__sbx_probe_name=$1
	case $1 in
	*/*) __sbx_probe_cmd=$1 ;;
	*) __sbx_probe_resolve "$1" ;;
	esac
	if [ -z "$__sbx_probe_cmd" ]; then
		printf 'probe: %s: command not found\n' "$1" >&2
		exit 127
	fi
	shift

	# ash exported SHLVL and PWD at startup: give them back as they were (or unset them)
	unset SHLVL PWD
	while IFS= read -r -d '' __sbx_probe_e; do
		case $__sbx_probe_e in
		SHLVL=*) SHLVL=${__sbx_probe_e#SHLVL=}; export SHLVL ;;
		PWD=*) PWD=${__sbx_probe_e#PWD=}; export PWD ;;
		esac
	done </proc/$$/environ
	unset __sbx_probe_e

	# sort reads its own environment: exactly what this shell passes a command it runs (as env -0
	# would print it, one process fewer)
	if [ "$(/.sandbox/probe/busybox sort -z /proc/self/environ | /.sandbox/probe/busybox md5sum)" = \
		"$(/.sandbox/probe/busybox sort -z </proc/$$/environ | /.sandbox/probe/busybox md5sum)" ]; then
		exec -a "$__sbx_probe_name" "$__sbx_probe_cmd" "$@"
	fi

	# the shell could not carry the environment as given (names it does not import, or special
	# variables it rewrote): pass the original entries through env -i instead
	__sbx_probe_s='exec /.sandbox/probe/busybox env -i --'
	__sbx_probe_i=0
	while IFS= read -r -d '' __sbx_probe_e; do
		case $__sbx_probe_e in *=*) ;; *) continue ;; esac
		__sbx_probe_i=$((__sbx_probe_i + 1))
		eval "__sbx_probe_v$__sbx_probe_i=\$__sbx_probe_e"
		__sbx_probe_s="$__sbx_probe_s \"\$__sbx_probe_v$__sbx_probe_i\""
	done </proc/$$/environ
	case $__sbx_probe_cmd in /*) ;; *) __sbx_probe_cmd="./$__sbx_probe_cmd" ;; esac
	eval "$__sbx_probe_s \"\$__sbx_probe_cmd\" \"\$@\""
	exit 126
}

# ash imports every variable of its environment, and the image's ENV or the container's could name
# the probe's own: an optional expectation (keyvars=, owntmpfs=, ...), a gathered value, the gate's
# word. Every name of the probe's namespaces starts unset, so what it reads is what it set itself.
while IFS= read -r -d '' __sbx_probe_e; do
	case ${__sbx_probe_e%%=*} in
	*[!A-Za-z0-9_]*) ;;   # not a name ash imports (and one unset would end the shell over)
	A_* | S_* | MI_* | RT_* | CG_* | K_* | L_* | ENV_* | EG_* | RC_* | _* | BB) unset "${__sbx_probe_e%%=*}" ;;
	esac
done </proc/$$/environ
unset __sbx_probe_e
trap '__sbx_probe_go=no' TERM
__sbx_probe_checks "$@"
__sbx_probe_gate "$@"
__sbx_probe_exec "$@"
