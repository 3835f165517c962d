# probe.sh: proves the sandbox inside the agent's own container, then execs the agent.
# POSIX sh for busybox ash; interface in CONTRACT.md. Run as:
#   /.sandbox/probe/busybox sh /.sandbox/probe/probe.sh key=value... -- agent argv...
#
# Design notes (why, not what):
# - The image is untrusted: every tool is "$BB" <applet>; a bare name is only ever a shell
#   builtin. PATH is emptied inside the checks so a slip cannot reach the image.
# - All checks run in a subshell: nothing they assign can leak into the agent's environment.
#   At top level the script assigns no variable; the exec step restores what ash itself changes
#   at startup (SHLVL, PWD) and verifies the exported environment is byte-identical to the one
#   the probe was given before it execs.
# - Fail closed: anything unreadable, unparsable or missing where required fails its check.
# - Never writes to /proc or /sys, never mounts, no network traffic. Write tests create a fresh
#   name with O_EXCL (noclobber) and remove it again if the creation unexpectedly succeeds;
#   "open for writing" tests use ">>" on existing regular files and write nothing.
# - Fast: files are read whole and split in memory (ash's read builtin does one syscall per
#   byte); one find walks all mounts that can hold sockets. About 30-40 ms in a Debian container.

# ---------------------------------------------------------------------------------------------
# helpers (all run inside the checks subshell)

# _p_line ID OK EXPECTED OBSERVED -- one result line; OK is 1 for pass
_p_line() {
	_l_e=${3:--}
	_l_o=${4:--}
	_l_e=${_l_e//[[:cntrl:]]/ }   # tabs, newlines, CRs and escapes would break the line format
	_l_o=${_l_o//[[:cntrl:]]/ }
	if [ "$2" = 1 ]; then _l_r=pass; else _l_r=fail; _P_FAILED=1; fi
	_P_N=$((_P_N + 1))
	printf 'PROBE\t%s\t%s\t%s\t%s\n' "$1" "$_l_r" "$_l_e" "$_l_o"
}

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
	eval "_a_l=\$$1"
	case ",$_a_l," in
	*",$2,"*) ;;
	*) eval "$1=\${_a_l:+\$_a_l,}\$2" ;;
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

# _p_trycreate DIR -- 0 if a new file could be created in DIR (it is removed again)
_p_trycreate() {
	_p_slash "$1"
	_t_b="$_P_R.sandbox-probe.$$"
	_t_f=$_t_b
	_t_n=0
	while [ -e "$_t_f" ] || [ -L "$_t_f" ]; do
		_t_n=$((_t_n + 1))
		[ "$_t_n" -lt 100 ] || return 0   # cannot find a free name: treat as writable
		_t_f="$_t_b.$_t_n"
	done
	if { true >"$_t_f"; } 2>/dev/null; then
		"$BB" rm -f -- "$_t_f" 2>/dev/null || { _p_esc "$_t_f"; _p_add _P_LEFT "$_P_R"; }
		return 0
	fi
	return 1
}

# _p_trymissing PATH -- PATH does not exist: 0 if its first missing component can be created
# (it is removed again), 2 if the nearest existing ancestor is not a directory, else 1
_p_trymissing() {
	_m_c=$1
	while :; do
		_m_p=${_m_c%/*}; [ -n "$_m_p" ] || _m_p=/
		{ [ -e "$_m_p" ] || [ -L "$_m_p" ]; } && break
		_m_c=$_m_p
	done
	[ -d "$_m_p" ] || return 2
	if "$BB" mkdir -- "$_m_c" 2>/dev/null; then
		"$BB" rmdir -- "$_m_c" 2>/dev/null || { _p_esc "$_m_c"; _p_add _P_LEFT "$_P_R"; }
		return 0
	fi
	return 1
}

# _p_validpath ESCAPED -- absolute, no raw whitespace, only \ooo escapes
_p_validpath() {
	case $1 in /*) ;; *) return 1 ;; esac
	case $1 in *" "* | *"$_P_TAB"* | *"$_P_NL"*) return 1 ;; esac
	_v_r=$1
	while :; do
		case $_v_r in *\\*) ;; *) return 0 ;; esac
		_v_r=${_v_r#*\\}
		case $_v_r in [0-3][0-7][0-7]*) ;; *) return 1 ;; esac
	done
}

_p_validlist() {
	[ -z "$1" ] && return 0
	case $1 in ,* | *, | *,,*) return 1 ;; esac
	set -f; _vl_ifs=$IFS; IFS=,
	for _vl_i in $1; do
		_p_validpath "$_vl_i" || { IFS=$_vl_ifs; set +f; return 1; }
	done
	IFS=$_vl_ifs; set +f
	return 0
}

# ---------------------------------------------------------------------------------------------
# ---- proxy mode: active checks from the sandbox's own network namespace -----------------------
# They run concurrently (each waits up to a second for something that must not answer) and print
# "id<TAB>0|1<TAB>expected<TAB>observed" lines for the main shell to record.

# _p_within SECONDS CMD... -- run CMD for at most SECONDS (fractions work, unlike busybox
# timeout, which counts whole seconds); its output and exit status are CMD's, 143 if cut off
_p_within() {
	_w_s=$1; shift
	"$@" &
	_w_p=$!
	"$BB" sleep "$_w_s"
	kill "$_w_p" 2>/dev/null
	wait "$_w_p"
}

# _p_hexip HEX -- little-endian hex of /proc/net/route to a dotted quad in _P_R
_p_hexip() {
	_P_R=$((0x${1#??????})).$((0x$(printf '%s' "$1" | "$BB" cut -c5-6))).$((0x$(printf '%s' "$1" | "$BB" cut -c3-4))).$((0x${1%??????}))
}

_p_chk_proxy() {
	_c_host=${A_proxy%:*}; _c_port=${A_proxy##*:}
	# busybox nc hangs up when its input ends, and Squid drops a request whose client left, so
	# the input stays open a moment while the answer (immediate for a 403) comes back.
	_c_r=$( { printf 'GET http://%s/ HTTP/1.0\r\nHost: %s\r\n\r\n' "$A_denyhost" "$A_denyhost"; "$BB" sleep 0.3; } |
		"$BB" nc -w 3 "$_c_host" "$_c_port" 2>&1 | "$BB" head -n 1)
	_c_r=${_c_r%"$_P_CR"}
	case $_c_r in
	HTTP/1.[01]\ *) printf 'egress.proxy\t1\t%s answers\t%s\n' "$A_proxy" "$_c_r" ;;
	*) printf 'egress.proxy\t0\t%s answers\t%s\n' "$A_proxy" "${_c_r:-no answer}" ;;
	esac
	case $_c_r in
	HTTP/1.[01]\ 403*) printf 'egress.denied\t1\t403 for %s\t%s\n' "$A_denyhost" "$_c_r" ;;
	*) printf 'egress.denied\t0\t403 for %s\t%s\n' "$A_denyhost" "${_c_r:-no answer}" ;;
	esac
}

# A direct connection to the gateway (the host's side of the network) must not get through. A
# refused connection proves the host is reachable, so only a timeout or "no route" passes.
_p_chk_direct() {
	if [ -z "$_gw" ]; then printf 'egress.direct\t1\tno path to the host\tno default route\n'; return; fi
	_p_hexip "$_gw"; _c_ip=$_P_R; _c_ok=1
	_c_obs=$(for _c_port in 80 443 22 2375; do
		{
			# A reachable host refuses or accepts within milliseconds: 0.3 s is plenty.
			_c_e=$(_p_within 0.3 "$BB" nc -w 1 "$_c_ip" "$_c_port" </dev/null 2>&1)
			case $?:$_c_e in
			0:*) echo "$_c_port:connected" ;;
			*refused*) echo "$_c_port:refused" ;;
			*) echo "$_c_port:blocked" ;;
			esac
		} &
	done; wait)
	case $_c_obs in *connected* | *refused*) _c_ok=0 ;; esac
	_c_obs=$(printf '%s' "$_c_obs" | "$BB" sort | "$BB" tr '\n' ' ')
	printf 'egress.direct\t%s\tno path to the host via %s\t%s\n' "$_c_ok" "$_c_ip" "${_c_obs# }"
}

# DNS: only Docker's embedded resolver, and it must not resolve a name only the proxy may reach.
_p_chk_dns() {
	_c_ok=1; _c_obs=
	for _c_ns in $("$BB" awk '$1 == "nameserver" { print $2 }' /etc/resolv.conf 2>/dev/null); do
		[ "$_c_ns" = 127.0.0.11 ] || { _c_ok=0; _c_obs="$_c_obs nameserver:$_c_ns"; }
	done
	if [ "$A_dnsname" != - ]; then
		# Docker's resolver answers at once for names it knows; an outside name gets no answer.
		case $(_p_within 0.3 "$BB" nslookup "$A_dnsname" 2>&1) in
		*Name:*) _c_ok=0; _c_obs="$_c_obs $A_dnsname:resolves" ;;
		esac
	fi
	printf 'egress.dns\t%s\tno outside name resolves (%s)\t%s\n' "$_c_ok" "$A_dnsname" "${_c_obs# }"
}

_p_egress() {
	_e_out=$( { _p_chk_proxy & _p_chk_direct & _p_chk_dns & wait; } )
	for _e_id in egress.proxy egress.denied egress.direct egress.dns; do
		_e_line=$(printf '%s\n' "$_e_out" | "$BB" grep "^$_e_id$_P_TAB")
		if [ -z "$_e_line" ]; then _p_line "$_e_id" 0 "a result" "the check did not report"; continue; fi
		_e_rest=${_e_line#*$_P_TAB}; _e_ok=${_e_rest%%$_P_TAB*}; _e_rest=${_e_rest#*$_P_TAB}
		_p_line "$_e_id" "$_e_ok" "${_e_rest%%$_P_TAB*}" "${_e_rest#*$_P_TAB}"
	done
}

_p_main() {
	BB=/.sandbox/probe/busybox
	PATH=
	_P_TAB='	'
	_P_NL='
'
	_P_CR=$(printf '\r')
	IFS=" $_P_TAB$_P_NL"
	_P_IFS=$IFS
	set -C          # noclobber: ">" never truncates, it creates with O_EXCL
	_P_N=0
	_P_FAILED=0
	_P_LEFT=

	# ---- arguments --------------------------------------------------------------------------
	_keys=",uid,gid,capbnd,nnp,seccomp,rofs,writable,mounts,protected,workspace,wsroot,net,pids,mem,proxy,denyhost,dnsname,"
	_bad=
	_seen=
	_dash=0
	_nafter=0
	for _a in "$@"; do
		if [ "$_dash" = 1 ]; then _nafter=$((_nafter + 1)); continue; fi
		case $_a in
		--) _dash=1; continue ;;
		*=*) _k=${_a%%=*}; _v=${_a#*=} ;;
		*) _p_esc "$_a"; _p_add _bad "bad:$_P_R"; continue ;;
		esac
		case $_keys in *",$_k,"*) ;; *) _p_esc "$_k"; _p_add _bad "unknown:$_P_R"; continue ;; esac
		if _p_in "$_k" "$_seen"; then _p_add _bad "duplicate:$_k"; continue; fi
		_p_add _seen "$_k"
		eval "A_$_k=\$_v"
		_ok=1
		case $_k in
		uid | gid) case $_v in '' | *[!0-9]*) _ok=0 ;; esac ;;
		capbnd) case $_v in *[!0-9a-fA-F]*) _ok=0 ;; esac; [ "${#_v}" = 16 ] || _ok=0 ;;
		nnp) case $_v in 0 | 1) ;; *) _ok=0 ;; esac ;;
		seccomp) case $_v in 0 | 1 | 2) ;; *) _ok=0 ;; esac ;;
		pids | mem) case $_v in max) ;; '' | *[!0-9]*) _ok=0 ;; esac ;;
		net) case $_v in none | proxy) ;; *) _ok=0 ;; esac ;;
		proxy) case $_v in -) ;; *:*[!0-9]* | :* | *: | *[!a-z0-9.:-]*) _ok=0 ;; *:*) ;; *) _ok=0 ;; esac ;;
		denyhost | dnsname) case $_v in -) ;; '' | *[!a-z0-9.-]*) _ok=0 ;; esac ;;
		workspace | wsroot) [ "$_v" = - ] || _p_validpath "$_v" || _ok=0 ;;
		*) _p_validlist "$_v" || _ok=0 ;;
		esac
		[ "$_ok" = 1 ] || { _p_esc "$_v"; _p_add _bad "invalid:$_k=$_P_R"; }
	done
	set -f; IFS=,
	for _k in ${_keys#,}; do
		[ -n "$_k" ] || continue
		_p_in "$_k" "$_seen" || _p_add _bad "missing:$_k"
	done
	IFS=$_P_IFS; set +f
	[ "$_dash" = 1 ] || _p_add _bad "missing:--"
	[ "$_dash" = 1 ] && [ "$_nafter" = 0 ] && _p_add _bad "missing:agent-argv"
	if [ "$A_workspace" != - ] && [ "$A_wsroot" = - ]; then _p_add _bad "invalid:wsroot=-"; fi
	if [ "$A_net" = proxy ] && { [ "$A_proxy" = - ] || [ "$A_denyhost" = - ]; }; then _p_add _bad "invalid:proxy=-"; fi
	if [ -n "$_bad" ]; then
		_p_line args 0 "key=value... -- argv" "$_bad"
		printf 'PROBE-END\tfail\t%s\n' "$_P_N"
		exit 97
	fi
	case $A_capbnd in *[A-F]*) A_capbnd=$(printf '%s' "$A_capbnd" | "$BB" tr A-F a-f) ;; esac
	_p_dec "$A_wsroot"; _p_esc "$_P_R"; A_wsroot=$_P_R   # raw commas -> \054, like the mountinfo fields below

	# ---- /proc/$$/status (the process that will exec the agent) ----------------------------
	# Files are read whole with one cat and split in memory: ash's read builtin costs one
	# syscall per byte, and every syscall passes the seccomp filter.
	_st_ok=1
	S_Uid= S_Gid= S_Groups=- S_CapInh= S_CapPrm= S_CapEff= S_CapBnd= S_CapAmb= S_NoNewPrivs= S_Seccomp=
	_st=$("$BB" cat "/proc/$$/status" 2>/dev/null) || _st_ok=0
	set -f; IFS=$_P_NL
	for _ln in $_st; do
		_k=${_ln%%:*}
		_v=${_ln#*:}
		_v=${_v//$_P_TAB/ }
		while :; do case $_v in " "*) _v=${_v# } ;; *) break ;; esac; done
		while :; do case $_v in *" ") _v=${_v% } ;; *) break ;; esac; done
		case $_k in
		Uid | Gid | Groups | CapInh | CapPrm | CapEff | CapBnd | CapAmb | NoNewPrivs | Seccomp)
			eval "S_$_k=\$_v" ;;
		esac
	done
	IFS=$_P_IFS; set +f
	[ -n "$S_Uid" ] || _st_ok=0

	# identity.uid / identity.gid: all four fields equal the expected, non-zero id
	for _k in uid gid; do
		eval "_exp=\$A_$_k"
		if [ "$_k" = uid ]; then _v=$S_Uid; else _v=$S_Gid; fi
		_ok=0
		if [ "$_st_ok" = 1 ]; then
			set -f; set -- $_v; set +f
			[ "$#" = 4 ] && [ "$1" = "$_exp" ] && [ "$2" = "$_exp" ] && [ "$3" = "$_exp" ] &&
				[ "$4" = "$_exp" ] && [ "$_exp" != 0 ] && _ok=1
		else _v="status unreadable"; fi
		_p_line "identity.$_k" "$_ok" "$_exp" "$_v"
	done

	# identity.groups: no supplementary group 0
	_ok=0
	if [ "$_st_ok" = 1 ] && [ "$S_Groups" != - ]; then
		_ok=1
		set -f
		for _g in $S_Groups; do
			case $_g in 0) _ok=0 ;; '' | *[!0-9]*) _ok=0 ;; esac
		done
		set +f
		_v=$S_Groups
	else _v="status unreadable"; fi
	_p_line identity.groups "$_ok" "no 0" "$_v"

	# caps.process: inheritable, permitted, effective, ambient all zero (one check: Docker
	# clears Inh and never sets Amb for a non-root user, so they cannot fail on their own)
	_ok=1; _v=
	for _k in Inh Prm Eff Amb; do
		eval "_c=\$S_Cap$_k"
		[ "$_c" = 0000000000000000 ] || _ok=0
		_v="$_v ${_k}=${_c:-missing}"
	done
	_p_line caps.process "$_ok" "Inh=Prm=Eff=Amb=0000000000000000" "${_v# }"
	_ok=0; [ -n "$S_CapBnd" ] && [ "$S_CapBnd" = "$A_capbnd" ] && _ok=1
	_p_line caps.bnd "$_ok" "$A_capbnd" "${S_CapBnd:-missing}"

	_ok=0; [ -n "$S_NoNewPrivs" ] && [ "$S_NoNewPrivs" = "$A_nnp" ] && _ok=1
	_p_line nnp "$_ok" "$A_nnp" "${S_NoNewPrivs:-missing}"

	_ok=0; [ -n "$S_Seccomp" ] && [ "$S_Seccomp" = "$A_seccomp" ] && _ok=1
	_p_line seccomp.mode "$_ok" "$A_seccomp" "${S_Seccomp:-missing}"

	# seccomp.unshare: a new user namespace (and a new net namespace) must be refused.
	# No -r: mapping ids would mean writing /proc/self/uid_map.
	_ok=1; _obs=
	for _k in U n; do
		_o=$("$BB" unshare -"$_k" "$BB" true 2>&1 </dev/null)
		if [ "$?" = 0 ]; then
			_ok=0; _o=succeeded
		else
			_o=${_o#unshare: }
			[ -n "$_o" ] || _o=failed
		fi
		_obs="${_obs:+$_obs; }-$_k: $_o"
	done
	_p_line seccomp.unshare "$_ok" "unshare -U and -n refused" "$_obs"

	# ---- mountinfo ---------------------------------------------------------------------------
	# fields: id parent major:minor root mountpoint options [optional...] - fstype source superopts
	_mi_ok=1
	_mi=$("$BB" cat "/proc/$$/mountinfo" 2>/dev/null) || _mi_ok=0
	[ -n "$_mi" ] || _mi_ok=0

	# pass 1: the mounts other rules refer to (the last one listed at a point is the visible one)
	MI_root_opts= MI_root_fst= MI_sys_opts= MI_procsys_opts= MI_dev_mm=none
	set -f; IFS=$_P_NL
	for _ln in $_mi; do
		IFS=' '; set -- $_ln
		[ "$#" -ge 9 ] || { _mi_ok=0; continue; }
		_mm=$3 _mp=$5 _opts=$6
		shift 6
		while [ "$#" -gt 0 ] && [ "$1" != - ]; do shift; done
		[ "$#" -ge 2 ] || { _mi_ok=0; continue; }
		case $_mp in
		/) MI_root_opts=$_opts; MI_root_fst=$2 ;;
		/sys) MI_sys_opts=$_opts ;;
		/proc/sys) MI_procsys_opts=$_opts ;;
		/dev) MI_dev_mm=$_mm ;;
		esac
	done
	IFS=$_P_IFS; set +f

	# pass 2: inventory, writable set, workspace, socket walk roots
	_allmps= _undecl= _wset= _ws_n=0 _ws_fst= _ws_root= _walk= _walkmps= _kern= _wk=' '
	set -f; IFS=$_P_NL
	[ "$_mi_ok" = 1 ] && for _ln in $_mi; do
		IFS=' '; set -- $_ln
		_id=$1 _par=$2 _mm=$3 _root=$4 _mp=$5 _opts=$6
		shift 6
		while [ "$#" -gt 0 ] && [ "$1" != - ]; do shift; done
		_fst=$2
		case $_mp in /*) ;; *) _mi_ok=0; continue ;; esac
		case $_mm in *:*) ;; *) _mi_ok=0; continue ;; esac
		[ -n "$_fst" ] && [ -n "$_opts" ] || { _mi_ok=0; continue; }
		_mp=${_mp//,/\\054}
		_root=${_root//,/\\054}
		_p_add _allmps "$_mp"

		# inventory
		_known=0
		case $_mp in
		/ | /proc | /dev | /dev/pts | /dev/shm | /dev/mqueue | /sys | /etc/resolv.conf | /etc/hostname | /etc/hosts) _known=1 ;;
		/proc/* | /sys/*)
			case $_fst in
			proc | sysfs | cgroup | cgroup2) _known=1 ;;
			tmpfs) [ "$_root" = / ] || { [ "$_root" = /null ] && [ "$_mm" = "$MI_dev_mm" ]; } && _known=1 ;;
			esac ;;
		esac
		[ "$_known" = 1 ] || _p_in "$_mp" "$A_mounts" || _p_in "$_mp" "$A_protected" || _p_add _undecl "$_mp"

		# writable set: rw per-mount option, minus the engine's own rw mounts
		case ",$_opts," in
		*,rw,*)
			_eng=0
			case $_mp in
			/proc | /dev | /dev/pts | /dev/shm | /dev/mqueue | /etc/resolv.conf | /etc/hostname | /etc/hosts) _eng=1 ;;
			/proc/*) [ "$_root" = /null ] && [ "$_mm" = "$MI_dev_mm" ] && _eng=1 ;;
			/sys/fs/cgroup) [ "$_fst" = tmpfs ] && _eng=1 ;;   # cgroup v1: root-owned 0555 tmpfs
			esac
			[ "$_eng" = 1 ] || _p_add _wset "$_mp" ;;
		*,ro,*) ;;
		*) _mi_ok=0 ;;
		esac

		# workspace
		if [ "$_mp" = "$A_workspace" ]; then
			_ws_n=$((_ws_n + 1)); _ws_fst=$_fst; _ws_root=$_root
		fi

		# socket walk. Kernel filesystems hold no socket files: pruned. The image's root
		# (read-only overlay) cannot hold one either: image layers cannot carry sockets and its
		# upper layer is read-only. Every other mount is walked once: as a start point when
		# the mount it sits on is not walked, else through that one.
		case $_fst in
		proc | sysfs | cgroup | cgroup2 | devpts | mqueue | securityfs | debugfs | tracefs | \
			pstore | bpf | configfs | fusectl | binfmt_misc | hugetlbfs)
			_p_add _kern "$_mp" ;;
		*)
			if [ "$_mp" = / ] && [ "$_fst" = overlay ] && _p_in ro "$_opts"; then :; else
				_p_add _walkmps "$_mp"
				case $_wk in *" $_par "*) ;; *) _p_add _walk "$_mp" ;; esac
				_wk="$_wk$_id "
			fi ;;
		esac
	done
	IFS=$_P_IFS; set +f
	_mierr="mountinfo unreadable or unparsable"

	# fs.root_ro
	_ok=0
	if [ "$_mi_ok" = 1 ] && [ -n "$MI_root_opts" ]; then
		case ",$MI_root_opts," in *,ro,*) _ok=1 ;; esac
		_v="/ $MI_root_opts"
	elif [ "$_mi_ok" = 1 ]; then _v="no / mount"
	else _v=$_mierr; fi
	_p_line fs.root_ro "$_ok" "/ ro" "$_v"

	# fs.rofs: creating a file in these directories fails with EROFS. Any other refusal
	# (EACCES as a non-root user) would hide a writable root, so it fails the check too.
	_ok=1; _obs=
	set -f; IFS=,
	for _p in $A_rofs; do
		IFS=$_P_IFS; set +f
		_p_dec "$_p"; _d=$_P_R
		if [ -d "$_d" ]; then
			_p_slash "$_d"; _t="$_P_R.sandbox-probe.$$"
		elif [ -e "$_d" ] || [ -L "$_d" ]; then
			_t=
			_ok=0; _p_add _obs "notdir:$_p"
		else
			_t=$_d   # creating the missing directory's name is refused the same way
		fi
		if [ -n "$_t" ]; then
			if [ -e "$_t" ] || [ -L "$_t" ]; then _ok=0; _p_add _obs "exists:$_p"
			elif _e=$( { true >"$_t"; } 2>&1 ); then
				"$BB" rm -f -- "$_t" 2>/dev/null || { _p_esc "$_t"; _p_add _P_LEFT "$_P_R"; }
				_ok=0; _p_add _obs "writable:$_p"
			else
				case $_e in *"Read-only file system"*) ;; *) _ok=0; _p_add _obs "not-erofs:$_p" ;; esac
			fi
		fi
		set -f; IFS=,
	done
	IFS=$_P_IFS; set +f
	_p_line fs.rofs "$_ok" "EROFS in $A_rofs" "$_obs"

	# fs.sysfs_ro: /sys ro mount, /proc/sys ro (mount or write-open refused), no sysrq-trigger
	_ok=1; _obs=
	if [ "$_mi_ok" != 1 ]; then _ok=0; _obs=$_mierr
	else
		case ",$MI_sys_opts," in
		*,ro,*) _obs="/sys=ro" ;;
		,,) _ok=0; _obs="/sys=no-mount" ;;
		*) _ok=0; _obs="/sys=rw" ;;
		esac
		# /proc/sys must be its own read-only mount: file modes alone would also refuse a
		# non-root writer, and would hide a runtime that left it writable.
		case ",$MI_procsys_opts," in
		*,ro,*) _obs="$_obs /proc/sys=ro" ;;
		,,) _ok=0; _obs="$_obs /proc/sys=no-mount" ;;
		*) _ok=0; _obs="$_obs /proc/sys=rw" ;;
		esac
	fi
	if { true >>/proc/sysrq-trigger; } 2>/dev/null; then
		_ok=0; _obs="$_obs sysrq-trigger=writable"
	else _obs="$_obs sysrq-trigger=refused"; fi
	_p_line fs.sysfs_ro "$_ok" "/sys ro, /proc/sys ro mount, sysrq-trigger refused" "$_obs"

	# mounts.inventory
	if [ "$_mi_ok" = 1 ]; then
		_ok=0; [ -z "$_undecl" ] && _ok=1; _obs=$_undecl
	else _ok=0; _obs=$_mierr; fi
	_p_line mounts.inventory "$_ok" "$A_mounts" "$_obs"

	# mounts.writable: set equality
	_ok=0
	if [ "$_mi_ok" = 1 ]; then
		_ok=1
		set -f; IFS=,
		for _p in $_wset; do _p_in "$_p" "$A_writable" || _ok=0; done
		for _p in $A_writable; do _p_in "$_p" "$_wset" || _ok=0; done
		IFS=$_P_IFS; set +f
		_obs=$_wset
	else _obs=$_mierr; fi
	_p_line mounts.writable "$_ok" "$A_writable" "$_obs"

	# mounts.workspace: exactly one bind mount, its root a suffix of the host real path
	if [ "$A_workspace" = - ]; then
		_p_line mounts.workspace 1 - -
	elif [ "$_mi_ok" != 1 ]; then
		_p_line mounts.workspace 0 "$A_workspace <- $A_wsroot" "$_mierr"
	else
		_ok=1
		[ "$_ws_n" = 1 ] || _ok=0
		case $_ws_fst in
		overlay | aufs | proc | sysfs | devpts | mqueue | cgroup | cgroup2 | '') _ok=0 ;;
		tmpfs | ramfs) [ "$_ws_root" != / ] || _ok=0 ;;   # a bind of a host tmpfs dir is fine
		esac
		case $_ws_root in /*) ;; *) _ok=0 ;; esac
		case $A_wsroot in *"$_ws_root") ;; *) _ok=0 ;; esac
		_p_line mounts.workspace "$_ok" "1 bind at $A_workspace <- $A_wsroot" \
			"$_ws_n at $A_workspace, $_ws_fst <- $_ws_root"
	fi

	# fs.protected
	_ok=1; _obs=
	set -f; IFS=,
	for _p in $A_protected; do
		IFS=$_P_IFS; set +f
		_p_dec "$_p"; _d=$_P_R
		if [ -L "$_d" ] && ! [ -e "$_d" ]; then
			_ok=0; _p_add _obs "dangling:$_p"
		elif [ -d "$_d" ] || [ -f "$_d" ]; then
			if [ -d "$_d" ]; then
				_p_trycreate "$_d" && { _ok=0; _p_add _obs "writable:$_p"; }
			elif { true >>"$_d"; } 2>/dev/null; then
				_ok=0; _p_add _obs "writable:$_p"
			fi
			# not a mount point: it could be renamed away unless its directory is read-only too
			if ! _p_in "$_p" "$_allmps"; then
				_pd=${_d%/*}; [ -n "$_pd" ] || _pd=/
				_p_trycreate "$_pd" && { _ok=0; _p_add _obs "replaceable:$_p"; }
			fi
		elif [ -e "$_d" ]; then
			_ok=0; _p_add _obs "type:$_p"
		else
			# missing: the first missing component must not be creatable
			_p_trymissing "$_d"
			case $? in
			0) _ok=0; _p_add _obs "creatable:$_p" ;;
			2) _ok=0; _p_add _obs "notdir-parent:$_p" ;;
			esac
		fi
		set -f; IFS=,
	done
	IFS=$_P_IFS; set +f
	_p_line fs.protected "$_ok" "$A_protected" "$_obs"

	# sockets.mounts: no socket file on any mount (kernel filesystems aside)
	_ok=1; _obs=
	if [ "$_mi_ok" != 1 ]; then _ok=0; _obs=$_mierr
	else
		set --
		set -f; IFS=,
		for _p in $_walk; do _p_dec "$_p"; set -- "$@" "$_P_R"; done
		if [ "$#" -gt 0 ]; then
			set -- "$@" \( -path /proc -o -path /sys
			for _p in $_kern; do
				_p_in "$_p" "$_walkmps" && continue
				_p_dec "$_p"
				_q=${_P_R//\\/\\\\}; _q=${_q//\*/\\*}; _q=${_q//\?/\\?}; _q=${_q//\[/\\[}
				set -- "$@" -o -path "$_q"
			done
			IFS=$_P_IFS; set +f
			_o=$("$BB" find "$@" \) -prune -o -type s -print 2>&1 </dev/null)
			_rc=$?
			_seen_err=0
			set -f; IFS=$_P_NL
			for _ln in $_o; do
				case $_ln in
				"find: "*": Permission denied") _seen_err=1 ;;
				"find: "*) _ok=0; _p_esc "${_ln#find: }"; _p_add _obs "error:$_P_R" ;;
				*) _ok=0; _p_esc "$_ln"; _p_add _obs "$_P_R" ;;
				esac
			done
			# a non-zero exit must be explained by permission errors only
			if [ "$_rc" != 0 ] && [ "$_seen_err" = 0 ] && [ "$_ok" = 1 ]; then _ok=0; _obs="find failed"; fi
		fi
		IFS=$_P_IFS; set +f
	fi
	_p_line sockets.mounts "$_ok" "no socket" "$_obs"

	# sockets.runtime: no runtime socket path exists (any type)
	_ok=1; _obs=
	for _p in /var/run/docker.sock /run/docker.sock /run/containerd/containerd.sock \
		/var/run/containerd/containerd.sock /run/docker/containerd/containerd.sock \
		/run/podman/podman.sock /var/run/podman/podman.sock /run/buildkit/buildkitd.sock \
		/var/run/buildkit/buildkitd.sock /run/crio/crio.sock /var/run/crio/crio.sock \
		/run/k3s/containerd/containerd.sock /run/dockershim.sock \
		/run/user/*/docker.sock /run/user/*/podman/podman.sock /run/user/*/buildkit/buildkitd.sock \
		/run/user/*/containerd/containerd.sock /var/run/user/*/docker.sock; do
		if [ -e "$_p" ] || [ -L "$_p" ]; then _ok=0; _p_esc "$_p"; _p_add _obs "$_P_R"; fi
	done
	_p_line sockets.runtime "$_ok" "none" "$_obs"

	# env.secrets / env.runtime: own environment first, then every readable /proc/*/environ
	_sec= _rt= _own=0
	for _f in /proc/$$/environ /proc/[0-9]*/environ; do
		[ "$_f" = "/proc/$$/environ" ] && { _own=$((_own + 1)); [ "$_own" = 1 ] || continue; }
		{ while IFS= read -r -d '' _e; do
			_n=${_e%%=*}
			case $_e in *=*) _v=${_e#*=} ;; *) _v= ;; esac
			case $_n in
			*[Tt][Oo][Kk][Ee][Nn]* | *[Ss][Ee][Cc][Rr][Ee][Tt]* | *[Pp][Aa][Ss][Ss][Ww][Oo][Rr][Dd]* | \
				*[Pp][Aa][Ss][Ss][Ww][Dd]* | *[Aa][Pp][Ii]_[Kk][Ee][Yy]* | *[Aa][Cc][Cc][Ee][Ss][Ss]_[Kk][Ee][Yy]* | \
				*[Pp][Rr][Ii][Vv][Aa][Tt][Ee]_[Kk][Ee][Yy]* | *[Cc][Rr][Ee][Dd][Ee][Nn][Tt][Ii][Aa][Ll]* | \
				[Aa][Ww][Ss]_* | [Aa][Zz][Uu][Rr][Ee]_* | [Gg][Ii][Tt][Hh][Uu][Bb]_[Tt][Oo][Kk][Ee][Nn] | \
				[Gg][Hh]_[Tt][Oo][Kk][Ee][Nn] | [Ss][Ss][Hh]_[Aa][Uu][Tt][Hh]_[Ss][Oo][Cc][Kk] | \
				[Gg][Pp][Gg]_[Aa][Gg][Ee][Nn][Tt]_[Ii][Nn][Ff][Oo] | \
				[Gg][Oo][Oo][Gg][Ll][Ee]_[Aa][Pp][Pp][Ll][Ii][Cc][Aa][Tt][Ii][Oo][Nn]_[Cc][Rr][Ee][Dd][Ee][Nn][Tt][Ii][Aa][Ll][Ss])
				_p_esc "$_n"; _p_add _sec "$_P_R" ;;
			*)
				case $_v in
				gh[opsur]_* | github_pat_* | glpat-* | sk-* | AKIA* | ASIA* | xox?-* | AIza* | -----BEGIN*)
					_p_esc "$_n"; _p_add _sec "$_P_R" ;;
				esac ;;
			esac
			case $_n in
			DOCKER_HOST | DOCKER_CONTEXT | DOCKER_CONFIG | DOCKER_CERT_PATH | DOCKER_TLS_VERIFY | \
				CONTAINER_HOST | BUILDKIT_HOST | KUBECONFIG) _p_add _rt "$_n" ;;
			esac
		done <"$_f"; } 2>/dev/null
	done
	_ok=0; [ -z "$_sec" ] && _ok=1
	_p_line env.secrets "$_ok" "no secret-shaped variable" "$_sec"
	if [ -n "$HOME" ]; then
		_p_slash "$HOME"
		if [ -e "$_P_R.docker/config.json" ] || [ -L "$_P_R.docker/config.json" ]; then
			_p_esc "$_P_R.docker/config.json"; _p_add _rt "$_P_R"
		fi
	fi
	_ok=0; [ -z "$_rt" ] && _ok=1
	_p_line env.runtime "$_ok" "no runtime endpoint" "$_rt"

	# creds.files
	_ok=1; _obs=
	set --
	if [ -n "$HOME" ]; then
		_p_slash "$HOME"; _h=$_P_R
		set -- "$_h.ssh" "$_h.aws" "$_h.config/gcloud" "$_h.azure" "$_h.kube" "$_h.netrc" \
			"$_h.git-credentials" "$_h.config/gh/hosts.yml" "$_h.pypirc" "$_h.gnupg"
		if [ -f "$_h.npmrc" ]; then
			{ while IFS= read -r _ln; do
				case $_ln in *_[Aa][Uu][Tt][Hh]*) _ok=0; _p_esc "$_h.npmrc"; _p_add _obs "$_P_R" ;; esac
			done <"$_h.npmrc"; } 2>/dev/null
		fi
	fi
	set -- "$@" /run/secrets
	for _p in "$@"; do
		if [ -e "$_p" ] || [ -L "$_p" ]; then _ok=0; _p_esc "$_p"; _p_add _obs "$_P_R"; fi
	done
	if [ "$A_workspace" != - ]; then
		_p_dec "$A_workspace"; _p_slash "$_P_R"; _f="$_P_R.git/config"
		if [ -f "$_f" ]; then
			{ while IFS= read -r _ln; do
				case $_ln in
				*[Uu][Rr][Ll]*=*://*)
					_u=${_ln#*://}; _u=${_u%%/*}
					case $_u in
					*:*@*) _ok=0; _p_add _obs "$A_workspace/.git/config:url-credentials" ;;
					*@*) case $_ln in *[Hh][Tt][Tt][Pp]://* | *[Hh][Tt][Tt][Pp][Ss]://*)
						_ok=0; _p_add _obs "$A_workspace/.git/config:url-credentials" ;; esac ;;
					esac ;;
				esac
			done <"$_f"; } 2>/dev/null
		fi
	fi
	_p_line creds.files "$_ok" "none" "$_obs"

	# net.interfaces: none -> only lo; proxy -> lo and exactly one interface (the internal network)
	_ok=1; _obs=; _nif=0
	for _p in /sys/class/net/* /sys/class/net/.[!.]*; do
		[ -e "$_p" ] || [ -L "$_p" ] || continue   # an unmatched pattern stays literal
		_n=${_p##*/}
		_p_esc "$_n"; _p_add _obs "$_P_R"
		[ "$_n" = lo ] || _nif=$((_nif + 1))
	done
	_p_in lo "$_obs" || _ok=0
	if [ "$A_net" = proxy ]; then
		[ "$_nif" = 1 ] || _ok=0
		_p_line net.interfaces "$_ok" "lo and one interface" "$_obs"
	else
		[ "$_nif" = 0 ] || _ok=0
		_p_line net.interfaces "$_ok" lo "$_obs"
	fi

	# net.routes: none -> no IPv4 route at all; proxy -> IPv4 routes only through that one
	# interface. Both: no IPv6 address or route beyond lo (IPv6 has no way out).
	_ok=1; _obs=; _nr=-1; _rdev=; _gw=
	if { while IFS= read -r _ln; do
		_nr=$((_nr + 1))
		[ "$_nr" -gt 0 ] || continue
		set -f; set -- $_ln; set +f
		_p_in "$1" "$_rdev" || _p_add _rdev "$1"
		[ "$2" != 00000000 ] || _gw=$3
	done </proc/net/route; } 2>/dev/null; then
		[ "$_nr" -ge 0 ] || { _ok=0; _obs="route: empty"; }
		if [ "$A_net" = proxy ]; then
			case $_rdev in *,*) _ok=0; _p_add _obs "ipv4 routes via $_rdev" ;; esac
		else
			[ "$_nr" -le 0 ] || { _ok=0; _p_add _obs "ipv4 routes: $_nr"; }
		fi
	else _ok=0; _obs="route: unreadable"; fi
	for _f in /proc/net/if_inet6 /proc/net/ipv6_route; do
		[ -e "$_f" ] || continue
		{ while IFS=' ' read -r _ln; do
			set -f; set -- $_ln; set +f
			[ "$#" -gt 0 ] || continue
			eval "_n=\${$#}"
			[ "$_n" = lo ] || { _ok=0; _p_add _obs "${_f##*/}:$_n"; }
		done <"$_f"; } 2>/dev/null || { _ok=0; _p_add _obs "${_f##*/}: unreadable"; }
	done
	if [ "$A_net" = proxy ]; then
		_p_line net.routes "$_ok" "ipv4 via one interface, no ipv6" "$_obs"
	else
		_p_line net.routes "$_ok" "none beyond lo" "$_obs"
	fi

	[ "$A_net" != proxy ] || _p_egress

	# limits.pids / limits.memory (cgroup v2 or v1)
	if [ -e /sys/fs/cgroup/cgroup.controllers ]; then
		_cgp=/sys/fs/cgroup/pids.max; _cgm=/sys/fs/cgroup/memory.max
	else
		_cgp=/sys/fs/cgroup/pids/pids.max; _cgm=/sys/fs/cgroup/memory/memory.limit_in_bytes
	fi
	_v=
	{ read -r _v <"$_cgp"; } 2>/dev/null
	_ok=0; [ -n "$_v" ] && [ "$_v" = "$A_pids" ] && _ok=1
	_p_line limits.pids "$_ok" "$A_pids" "${_v:-unreadable:$_cgp}"
	_v=
	{ read -r _v <"$_cgm"; } 2>/dev/null
	case $_v in
	'' | max) ;;
	*[!0-9]*) ;;
	*) if [ "${#_v}" -gt 19 ] || [ "$_v" -ge 4611686018427387904 ]; then _v=max; fi ;;
	esac
	_ok=0; [ -n "$_v" ] && [ "$_v" = "$A_mem" ] && _ok=1
	_p_line limits.memory "$_ok" "$A_mem" "${_v:-unreadable:$_cgm}"

	# proc.pid1: PID 1 is this probe (own PID namespace), and only a handful of processes
	_x=$("$BB" readlink /proc/1/exe 2>/dev/null </dev/null)
	_np=0
	for _p in /proc/[0-9]*; do _np=$((_np + 1)); done
	_ok=0; [ "$_x" = "$BB" ] && [ "$_np" -lt 50 ] && _ok=1
	_p_line proc.pid1 "$_ok" "exe=$BB procs<50" "exe=${_x:-unreadable} procs=$_np"

	# dev.nodes: only the engine's standard entries; no block device; char devices only the
	# standard ones and pty slaves
	_ok=1; _obs=
	for _p in /dev/* /dev/.[!.]* /dev/..?*; do
		[ -e "$_p" ] || [ -L "$_p" ] || continue
		_n=${_p#/dev/}
		case $_n in
		null | zero | full | random | urandom | tty | console | ptmx | pts | shm | mqueue | fd | \
			stdin | stdout | stderr | core) ;;
		*) _ok=0; _p_esc "$_p"; _p_add _obs "$_P_R" ;;
		esac
	done
	_o=$("$BB" find /dev \( -type b -o -type c \) -print 2>&1 </dev/null)
	_rc=$?
	set -f; IFS=$_P_NL
	for _ln in $_o; do
		case $_ln in
		/dev/null | /dev/zero | /dev/full | /dev/random | /dev/urandom | /dev/tty | /dev/console | \
			/dev/pts/ptmx) [ -b "$_ln" ] && { _ok=0; _p_add _obs "block:$_ln"; } ;;
		/dev/pts/[0-9]*) case ${_ln#/dev/pts/} in *[!0-9]*) _ok=0; _p_esc "$_ln"; _p_add _obs "$_P_R" ;; esac ;;
		"find: "*) _ok=0; _p_esc "$_ln"; _p_add _obs "error:$_P_R" ;;
		*) _ok=0; _p_esc "$_ln"; _p_add _obs "$_P_R" ;;
		esac
	done
	IFS=$_P_IFS; set +f
	[ "$_rc" = 0 ] || _ok=0
	_p_line dev.nodes "$_ok" "standard nodes only" "$_obs"

	# ---- end ----------------------------------------------------------------------------------
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

# ---------------------------------------------------------------------------------------------
# exec step: runs in the probe's own process, so it must not disturb the environment. Only
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

	if [ "$(/.sandbox/probe/busybox env -0 | /.sandbox/probe/busybox sort -z | /.sandbox/probe/busybox md5sum)" = \
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

(_p_main "$@") </dev/null || exit 97
__sbx_probe_exec "$@"
