#!/bin/sh
# /init of the e2e initramfs (tests/xen/run-e2e.sh): runs as PID 1 in Xen's
# dom0 under QEMU, checks pvemud --host=xen from inside, prints one
# "E2E CHECK PASS|FAIL: ..." line per check, then "E2E PASS" or "E2E FAIL",
# and powers off. run-e2e.sh decides from these markers on the serial log.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
/bin/busybox mkdir -p /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /run/pvemu /tmp /var/lib
export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu

FAILED=0
SOCK=unix:///run/pvemu/pvemu.sock
STATE=/var/lib/pvemu
LOG=/tmp/pvemud.log
PID=

say() { echo "E2E: $*"; }
pass() { echo "E2E CHECK PASS: $*"; }
fail() { echo "E2E CHECK FAIL: $*"; FAILED=1; }
finish() {
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID"; wait "$PID"
  fi
  [ -f "$LOG" ] && { say "pvemud log:"; sed 's/^/  | /' "$LOG"; }
  if [ "$FAILED" = 0 ]; then echo "E2E PASS"; else echo "E2E FAIL"; fi
  sync
  poweroff -f
}
# pvemuctl with a bounded wait; its output goes to /tmp/out, echoed indented.
ctl() {
  timeout 60 /usr/bin/pvemuctl --server="$SOCK" "$@" >/tmp/out 2>&1
  rc=$?
  sed 's/^/  > /' /tmp/out
  return $rc
}
# start_pvemud [FLAG...]: the daemon on Xen, with any extra flags.
start_pvemud() {
  : >"$LOG"
  /usr/bin/pvemud --host=xen --listen="$SOCK" --state-dir="$STATE" "$@" 2>"$LOG" &
  PID=$!
  i=0
  while [ $i -lt 120 ]; do
    grep -q 'pvemud: ready on' "$LOG" && return 0
    kill -0 "$PID" 2>/dev/null || { wait "$PID"; say "pvemud exited with $?"; return 1; }
    sleep 0.5; i=$((i + 1))
  done
  return 1
}
stop_pvemud() {
  kill -TERM "$PID" && wait "$PID"
  rc=$?
  PID=
  return $rc
}
# The value of an rdmsr outcome printed as "... got COMPLETED rax=0x.. rdx=0x..".
got_value() {
  rax=$(sed -n 's/.*got COMPLETED rax=\(0x[0-9a-f]*\) rdx=\(0x[0-9a-f]*\).*/\1/p' /tmp/out | head -1)
  rdx=$(sed -n 's/.*got COMPLETED rax=\(0x[0-9a-f]*\) rdx=\(0x[0-9a-f]*\).*/\2/p' /tmp/out | head -1)
  [ -n "$rax" ] && [ -n "$rdx" ] || return 1
  echo $(( (rdx << 32) | (rax & 0xffffffff) ))
}
probe_value() {
  sed -n 's/.*value=0x[0-9a-f]* (\([0-9]*\)).*/\1/p' /tmp/out | head -1
}

say "dom0 kernel $(uname -r), $(grep -c ^processor /proc/cpuinfo) vCPUs, $(sed -n 's/MemTotal: *//p' /proc/meminfo)"

# 0. Before dom0's Xen modules are loaded, pvemud --host=xen must exit at once
#    and name what is missing.
t0=$(date +%s)
timeout 30 /usr/bin/pvemud --host=xen --listen="$SOCK" --state-dir=/tmp/nostate >/tmp/out 2>&1
rc=$?
sed 's/^/  > /' /tmp/out
if [ $rc = 1 ] && grep -q 'xen-privcmd' /tmp/out && [ $(( $(date +%s) - t0 )) -le 10 ]; then
  pass "without xen-privcmd loaded, pvemud --host=xen exits 1 at once naming the module"
else
  fail "pvemud --host=xen without xen-privcmd: exit $rc"
fi

# 1. Xen's dom0 interfaces: modules, xenfs, privcmd.
ok=1
for m in $(cat /etc/e2e-modules); do
  insmod "/lib/modules/$m" || { ok=0; say "insmod $m failed"; }
done
mkdir -p /proc/xen
mount -t xenfs xenfs /proc/xen || ok=0
caps=$(cat /proc/xen/capabilities 2>/dev/null)
[ -c /dev/xen/privcmd ] || ok=0
[ -c /dev/cpu/0/msr ] || ok=0
if [ $ok = 1 ] && [ "$caps" = control_d ]; then
  pass "dom0: modules loaded, xenfs on /proc/xen (capabilities: $caps), /dev/xen/privcmd present"
else
  fail "dom0 setup: capabilities='$caps'; $(ls /dev/xen 2>&1)"
  finish
fi

# 2. The daemon starts on the real hypervisor.
if start_pvemud; then
  pass "pvemud --host=xen started: $(grep 'pvemud: ready on' "$LOG")"
else
  fail "pvemud --host=xen did not log ready"
  finish
fi
grep -q 'host xen 4\.17' "$LOG" || fail "ready line does not name host xen 4.17"

# 3. pvemuctl domains lists dom0, live and running.
if ctl domains && ctl -o json domains &&
   dom0=$(grep -E '"domain":0[,}]' /tmp/out) &&
   echo "$dom0" | grep -q '"live":true' && echo "$dom0" | grep -q '"state":"running"'; then
  pass "pvemuctl domains lists dom0 live and running"
else
  fail "pvemuctl domains does not list dom0 live and running"
fi

# 4. stats name the host.
case $(sed -n 's/^vendor_id[^:]*: *//p' /proc/cpuinfo | head -1) in
  GenuineIntel) vendor=intel ;; AuthenticAMD) vendor=amd ;; HygonGenuine) vendor=hygon ;; *) vendor=other ;;
esac
if ctl -o json stats && grep -q '"host":"xen 4\.17"' /tmp/out &&
   grep -q "\"host_vendor\":\"$vendor\"" /tmp/out; then
  pass "pvemuctl stats: host $(sed -n 's/.*"host":"\([^"]*\)".*/\1/p' /tmp/out), vendor $vendor as dom0's /proc/cpuinfo says"
else
  fail "pvemuctl stats does not name host xen 4.17 and vendor $vendor (from /proc/cpuinfo)"
fi

# 5. Xen's own answer for MSR 0x10 (IA32_TSC) through xc_resource_op, twice,
#    and its refusal of an MSR outside its allow-list (IA32_MISC_ENABLE).
ctl_probe() { timeout 30 /usr/bin/xen-msr-probe "$@" >/tmp/out 2>&1; rc=$?; sed 's/^/  > /' /tmp/out; return $rc; }
ctl_probe 0x10 0 && a=$(probe_value)
sleep 0.2
ctl_probe 0x10 0 && b=$(probe_value)
if [ -n "$a" ] && [ -n "$b" ] && [ "$a" -gt 0 ] && [ "$b" -gt "$a" ]; then
  pass "xc_resource_op reads MSR 0x10 on CPU 0: $a then $b (nonzero, increasing)"
else
  fail "xc_resource_op MSR 0x10 reads: '$a' '$b'"
fi
ctl_probe 0x1a0 0; rc=$?
if [ $rc = 3 ] && grep -q 'errno=1 ' /tmp/out; then
  pass "Xen refuses MSR 0x1a0 through xc_resource_op (EPERM: not on its allow-list)"
else
  fail "expected Xen to refuse MSR 0x1a0 with EPERM (probe exit $rc)"
fi

# 6. The same MSRs through pvemud's trap path (PASSTHROUGH rules for domain 7,
#    replayed over gRPC): 0x10 completes, 0x1a0 is Xen's refusal as #GP(0).
if ctl policy set-rule --domain=7 --msr=0x10 --read=PASSTHROUGH &&
   ctl policy set-rule --domain=7 --msr=0x1a0 --read=PASSTHROUGH &&
   ctl -o json replay --server="$SOCK" /etc/e2e/passthrough.textproto &&
   grep -q '"mismatches":0' /tmp/out && grep -q '"checked":2' /tmp/out; then
  pass "through pvemud: rdmsr 0x10 PASSTHROUGH completes, rdmsr 0x1a0 PASSTHROUGH (refused by Xen) is #GP"
else
  fail "replay of passthrough.textproto through pvemud"
fi
#    The value pvemud read lies between two direct reads. The record expects
#    the value 0, so replay reports a mismatch naming the value it got.
ctl_probe 0x10 0; t1=$(probe_value)
ctl replay --server="$SOCK" /etc/e2e/tsc-value.textproto
v=$(got_value)
ctl_probe 0x10 0; t2=$(probe_value)
if [ -n "$v" ] && [ -n "$t1" ] && [ -n "$t2" ] && [ "$t1" -le "$v" ] && [ "$v" -le "$t2" ]; then
  pass "rdmsr 0x10 through pvemud returned $v, between Xen's direct reads $t1 and $t2"
else
  fail "rdmsr 0x10 through pvemud: '$v' not within ['$t1', '$t2']"
fi

# 7. pvemu's vm_event ring code against Xen: a tiny HVM domain is monitored
#    (ring mapped, event channel bound, MOV_TO_MSR subscribed), closed and
#    reopened; its 32-bit code writes MSR 0x174 twice, the first event is
#    allowed and the second denied (whether Xen honours the deny is reported,
#    see README); dom0 itself is refused with a message.
timeout 120 /usr/bin/xen-monitor-probe >/tmp/out 2>&1
rc=$?
sed 's/^/  > /' /tmp/out
if [ $rc = 0 ] && grep -q 'MONITOR PROBE OK' /tmp/out; then
  pass "vm_event: an HVM guest's WRMSR 0x174 reached pvemu's ring code twice with the right MSR, values, RIP, mode, CPL; each answer released the vCPU, the allowed write took effect; dom0 refused"
  say "vm_event: $(sed -n 's/^monitor-probe: \(VM_EVENT_FLAG_DENY .*\)/\1/p' /tmp/out)"
else
  fail "vm_event probe (exit $rc)"
fi

# 8. A policy edit is accepted, and survives a restart of the daemon.
if ctl policy set-rule --domain=5 --msr=0x1b0 --read=ZERO; then
  pass "policy set-rule --domain=5 --msr=0x1b0 --read=ZERO accepted"
else
  fail "policy set-rule --domain=5 --msr=0x1b0 --read=ZERO"
fi
if stop_pvemud; then pass "pvemud stopped cleanly on SIGTERM"; else fail "pvemud exit status on SIGTERM"; fi
if start_pvemud; then pass "pvemud restarted"; else fail "pvemud did not restart"; finish; fi
if ctl policy get --domain=5 && grep -q '0x1b0' /tmp/out && grep -q 'ZERO' /tmp/out; then
  pass "after restart, policy get --domain=5 still has the 0x1b0 ZERO rule"
else
  fail "the domain 5 rule did not survive the restart"
fi
if ctl domains && grep -q '^5 ' /tmp/out && grep -q '^0 .*running' /tmp/out; then
  pass "after restart, domains lists dom0 running and domain 5 configured"
else
  fail "domains after restart"
fi
# 9. A real HVM guest on Xen answered by pvemud: hvm_guest.S executes CPUID
#    on leaves its policy sets and on leaves it does not, and IN/OUT on ports
#    pvemud claims; it prints every value it got on its console (port 0xe9,
#    which Xen logs as "(dN) ..."). pvemud --monitor-domain answers its CPUID
#    through vm_event, --monitor-ports its port I/O through an ioreq server.
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
timeout 60 /usr/bin/xen-hvm-guest create /etc/e2e/hvm-guest.bin >/tmp/out 2>&1
sed 's/^/  > /' /tmp/out
guest=$(sed -n 's/^domid \([0-9][0-9]*\)$/\1/p' /tmp/out)
if [ -z "$guest" ]; then
  fail "xen-hvm-guest create: no domain"
  finish
fi
sed "s/^  domain: [0-9]*/  domain: $guest/" /etc/e2e/guest-policy.textproto >/tmp/guest-policy.textproto
if ctl policy apply -f /tmp/guest-policy.textproto --domain="$guest"; then
  pass "the guest's policy (CPUID leaves 6, 1, 7/1; port 0x510-0x513) applied to domain $guest"
else
  fail "policy apply for domain $guest"
fi
stop_pvemud
if start_pvemud --monitor-domain="$guest" --monitor-ports=0x510-0x513,0x520 \
     --metrics=127.0.0.1:9464 &&
   grep -q "pvemud: monitoring domain $guest on Xen: CPUID, writes of 0 MSRs, ports 0x510-0x513,0x520 (ioreq server)" "$LOG"; then
  pass "pvemud --monitor-domain=$guest --monitor-ports=0x510-0x513,0x520 started (CPUID monitor and ioreq server on the paused guest)"
else
  fail "pvemud with --monitor-domain=$guest did not start"
  finish
fi
timeout 200 /usr/bin/xen-hvm-guest run "$guest" 150 >/tmp/guest.out 2>&1
rc=$?
sed 's/^/  > /' /tmp/guest.out
[ $rc = 0 ] && pass "the HVM guest ran to its end (domain $guest)" || fail "the HVM guest did not finish (exit $rc)"
# guest_line PATTERN: the guest's console line matching PATTERN, after "= ".
guest_line() { sed -n "s/.*pvemu-guest: $1 = //p" /tmp/guest.out | head -1; }
v=$(guest_line 'cpuid 00000006 00000000')
if [ "$v" = "11111111 22222222 33333333 44444444" ]; then
  pass "guest CPUID leaf 6 = $v: the policy's CONST values, from pvemu"
else
  fail "guest CPUID leaf 6 = '$v', want the policy's 11111111 22222222 33333333 44444444"
fi
v=$(guest_line 'cpuid 00000001 00000000')
ecx=$(echo "$v" | cut -d' ' -f3)
edx=$(echo "$v" | cut -d' ' -f4)
# ECX bit 31 and EDX bit 0 cleared, ECX bit 2 set by the rule; EDX bit 4
# (TSC) is Xen's, kept: the rule masked Xen's answer, it did not replace it.
if [ -n "$ecx" ] && [ -n "$edx" ] && [ $(( 0x$ecx & 0x80000004 )) = 4 ] &&
   [ $(( 0x$edx & 0x11 )) = 16 ]; then
  pass "guest CPUID leaf 1 = $v: Xen's answer through the policy's HOST mask (ECX bit 31 and EDX bit 0 cleared, ECX bit 2 set, Xen's EDX bit 4 kept)"
else
  fail "guest CPUID leaf 1 = '$v': want ECX bit 31 clear, bit 2 set, EDX bit 0 clear, bit 4 set"
fi
v=$(guest_line 'cpuid 00000007 00000001')
if [ "$v" = "00007e57 00000000 00000000 00000000" ]; then
  pass "guest CPUID leaf 7 subleaf 1 = $v: the subleaf rule"
else
  fail "guest CPUID leaf 7 subleaf 1 = '$v', want 00007e57 00000000 00000000 00000000"
fi
case $vendor in
  amd) want_vendor="68747541 444d4163 69746e65" ;;    # AuthenticAMD: EBX ECX EDX
  intel) want_vendor="756e6547 6c65746e 49656e69" ;;  # GenuineIntel
  *) want_vendor=unknown ;;
esac
v=$(guest_line 'cpuid 00000000 00000000')
if [ "$(echo "$v" | cut -d' ' -f2-4)" = "$want_vendor" ]; then
  pass "guest CPUID leaf 0 = $v: not in the policy, so Xen's own answer (vendor $vendor)"
else
  fail "guest CPUID leaf 0 = '$v', want Xen's answer with vendor $vendor ($want_vendor)"
fi
v=$(guest_line 'cpuid 40000000 00000000')
if [ "$(echo "$v" | cut -d' ' -f2-4)" = "566e6558 65584d4d 4d4d566e" ]; then
  pass "guest CPUID leaf 0x40000000 = $v: Xen's own signature XenVMMXenVMM"
else
  fail "guest CPUID leaf 0x40000000 = '$v', want Xen's signature 566e6558 65584d4d 4d4d566e"
fi
a=$(guest_line 'in 00000510')
b=$(guest_line 'in 00000520')
# These are the values pvemu's policy gives, but Xen's null handler would
# read all ones too: that pvemu answered is the trap count below.
if [ "$a" = ffffffff ] && [ "$b" = 000000ff ]; then
  pass "guest IN: 0x510 (granted, no device behind it) = $a, 0x520 (not granted) = $b, as the policy answers (who answered: the counts below)"
else
  fail "guest IN: 0x510 = '$a', 0x520 = '$b', want ffffffff and 000000ff"
fi
# The guest's traps as pvemud counted them (GET /metrics).
wget -q -O /tmp/metrics http://127.0.0.1:9464/metrics || fail "GET /metrics"
# traps INSN: the guest's traps of INSN over every outcome (a granted port
# with no device is device_io, a denied one completed).
traps() {
  sed -n "s/^pvemu_traps_total{domain=\"$guest\",instruction=\"$1\",outcome=\"[a-z_]*\"} //p" \
    /tmp/metrics | awk '{ n += $1 } END { print n + 0 }'
}
grep "^pvemu_traps_total{domain=\"$guest\"" /tmp/metrics | sed 's/^/  > /'
if [ "$(traps cpuid)" = 5 ] && [ "$(traps in)" = 2 ] && [ "$(traps out)" = 2 ]; then
  pass "pvemud counted the guest's 5 CPUID, 2 IN and 2 OUT traps (/metrics)"
else
  fail "pvemud's counts for domain $guest: cpuid '$(traps cpuid)' in '$(traps in)' out '$(traps out)', want 5, 2, 2"
fi
# What explain says Xen lets this pvemud carry out.
if ctl explain --domain="$guest" --port=0x510 --width=4 &&
   grep -q 'on this host: enforced on Xen: pvemud.s ioreq server' /tmp/out &&
   ctl explain --domain="$guest" --port=0x3f8 &&
   grep -q 'on this host: advisory on Xen: Xen 4.17 has no event for I/O instructions' /tmp/out &&
   ctl explain --domain="$guest" --msr=0x174 &&
   grep -q 'on this host: advisory on Xen: Xen has no event for RDMSR' /tmp/out; then
  pass "explain on Xen: port 0x510 enforced (claimed), port 0x3f8 and RDMSR advisory"
else
  fail "explain's host notes on Xen"
fi
# 10. xen-config: the xl.cfg fragment for what Xen itself can enforce of the
#     guest's policy, read by Xen's own parser in dom0 (xl-cfg-check:
#     libxlutil and libxenlight's cpuid parser, as xl does).
timeout 60 /usr/bin/pvemuctl --server="$SOCK" xen-config --domain="$guest" \
  >/tmp/guest.cfg 2>/tmp/err
rc=$?
sed 's/^/  > /' /tmp/guest.cfg /tmp/err
timeout 30 /usr/bin/xl-cfg-check /tmp/guest.cfg >/tmp/out 2>&1
check_rc=$?
sed 's/^/  > /' /tmp/out
if [ $rc = 0 ] && [ $check_rc = 0 ] && grep -qx 'msr_relaxed: false' /tmp/out &&
   grep -qx 'cpuid: 3 items, 3 policy entries' /tmp/out &&
   grep -q '^# not expressible: .*io_port 0x510-0x513' /tmp/guest.cfg; then
  pass "xen-config --domain=$guest: msr_relaxed and 3 cpuid items accepted by Xen's parser in dom0; io_port reported as not expressible"
else
  fail "xen-config fragment (pvemuctl exit $rc, xl-cfg-check exit $check_rc)"
fi
ctl stats

finish
