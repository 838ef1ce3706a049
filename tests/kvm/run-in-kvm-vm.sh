#!/usr/bin/env bash
# run-in-kvm-vm.sh: runs one command inside a QEMU guest that has KVM, for
# machines without /dev/kvm. QEMU emulates an AMD CPU with SVM and nested
# paging in software (TCG); Debian's kernel boots in it from an initramfs,
# loads kvm-amd, and /dev/kvm works inside (user-space MSR exits and the MSR
# filter included; a user-space RDMSR exit round trip takes about 55 us, and
# an RDMSR KVM handles itself about as long, so time only ratios here).
#
# Usage: tests/kvm/run-in-kvm-vm.sh [--smp=N] [--copy=PATH]... -- COMMAND [ARGS...]
#
#   --smp=N      guest CPUs (default 2)
#   --copy=PATH  a file or directory the command needs; repeatable
#
# COMMAND, every --copy PATH and all their shared libraries (ldd's list, the
# dynamic loader and /etc/ld.so.cache) sit in the guest AT THE SAME ABSOLUTE
# PATHS as here, and the command runs in the same working directory, so it
# runs unchanged, for example from the source directory:
#   tests/kvm/run-in-kvm-vm.sh --copy=guest.bin -- build/kvm/vm/pvemu-vm \
#     --policy=kvm guest.bin -o json
# /tmp is writable; everything else is an in-memory copy that is thrown away,
# with whatever files the command writes: only stdout, stderr and the exit
# status come back.
#
# Output and status: this script's stdout is exactly the command's stdout,
# and its stderr the command's stderr (each captured to a file in the guest,
# then sent back in a tar archive on a second serial port, so that kernel
# messages never mix in). It exits with the command's exit status, or:
#   77  the guest has no /dev/kvm (the KVM modules did not load; why on stderr)
#   99  this harness failed: packages unavailable, the guest did not boot or
#       report, or the run passed PVEMU_KVM_VM_TIMEOUT (what happened on stderr)
#
# Environment:
#   PVEMU_* and GTEST_*    passed into the guest, to the command
#   PVEMU_KVM_VM_CACHE     downloaded packages, the unpacked kernel, modules and
#                          busybox (default /var/cache/pvemu-kvm-vm)
#   PVEMU_KVM_VM_TIMEOUT   bound on the whole run in seconds, downloads included
#                          (default 1200); the command itself is killed a little
#                          earlier, so that its output so far still comes back
#   PVEMU_KVM_VM_MEMORY    guest RAM in MiB (default 1024); the initramfs lives in it
#   PVEMU_KVM_VM_CPU       QEMU -cpu (default qemu64,+svm,+npt: SVM with nested
#                          paging is what kvm-amd needs; TCG emulates no VMX)
#   PVEMU_KVM_VM_KERNEL_PKG  the kernel package (default: what linux-image-amd64
#                          depends on, as tests/xen/run-e2e.sh resolves it)
#   PVEMU_KVM_VM_ACCEL     QEMU -accel (default tcg,thread=single)
#   PVEMU_KVM_VM_KERNEL_ARGS  extra kernel arguments (default mitigations=off tsc=reliable)
#   PVEMU_KVM_VM_RETRIES   boots again after a guest kernel lockup, at most this
#                          many times (default 2)
#   PVEMU_KVM_VM_VERBOSE   1: progress and the guest's console log on stderr
#
# Packages: qemu-system-x86 and cpio are installed with apt-get if missing
# (that needs root). Debian's kernel and busybox-static are fetched with
# `apt-get download` into the cache and unpacked there, never installed. The
# kernel is unpacked once and only its KVM modules are kept; each run builds
# only the initramfs (uncompressed: decompressing in an emulated CPU costs
# more than QEMU's loading a bigger file).
set -euo pipefail

PROG=run-in-kvm-vm
START=$SECONDS
TIMEOUT=${PVEMU_KVM_VM_TIMEOUT:-1200}
CACHE=${PVEMU_KVM_VM_CACHE:-/var/cache/pvemu-kvm-vm}
MEMORY=${PVEMU_KVM_VM_MEMORY:-1024}
CPU_MODEL=${PVEMU_KVM_VM_CPU:-qemu64,+svm,+npt}
# One TCG thread for all guest CPUs: with a thread per CPU (MTTCG) the guest
# kernel locked up in 2 of about 25 runs on this 2-core host (one CPU never
# answered an IPI); with one thread, none of 15 did, and runs took as long.
ACCEL=${PVEMU_KVM_VM_ACCEL:-tcg,thread=single}
KERNEL_ARGS=${PVEMU_KVM_VM_KERNEL_ARGS-mitigations=off tsc=reliable}
VERBOSE=${PVEMU_KVM_VM_VERBOSE:-0}
SMP=2
COPIES=()

say() { echo "$PROG: $*" >&2; }
step() { if [ "$VERBOSE" = 1 ]; then say "[$((SECONDS - START))s] $*"; fi; }
# Harness failures exit 99, which meson reports as an ERROR, not a FAIL.
die() { say "$*"; exit 99; }

usage() {
  echo "Usage: $0 [--smp=N] [--copy=PATH]... -- COMMAND [ARGS...]" >&2
  exit 99
}

# --- arguments -----------------------------------------------------------------
while [ $# -gt 0 ]; do
  case $1 in
    --smp=*) SMP=${1#--smp=} ;;
    --copy=*) COPIES+=("${1#--copy=}") ;;
    --) shift; break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 0 ;;
    -*) say "unknown option $1"; usage ;;
    *) break ;;
  esac
  shift
done
[ $# -gt 0 ] || { say "no COMMAND after --"; usage; }
[[ $SMP =~ ^[1-9][0-9]?$ ]] || die "--smp=$SMP is not a CPU count: give 1 to 99"
[[ $TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "PVEMU_KVM_VM_TIMEOUT=$TIMEOUT is not whole seconds above 0"
[[ $MEMORY =~ ^[1-9][0-9]*$ ]] || die "PVEMU_KVM_VM_MEMORY=$MEMORY is not MiB above 0"

# Seconds left of the whole run's bound.
remaining() {
  local left=$((TIMEOUT - (SECONDS - START)))
  [ "$left" -gt 0 ] || die "the run passed PVEMU_KVM_VM_TIMEOUT=${TIMEOUT}s before the guest booted"
  echo "$left"
}
bounded() { timeout -k 5 "$(remaining)" "$@"; }

# An absolute path without resolving symlinks: the path the command will use.
abspath() {
  case $1 in
    /*) realpath -s -m -- "$1" ;;
    *) realpath -s -m -- "$PWD/$1" ;;
  esac
}

# The command and the copies, checked before anything slow.
cmd=$1
if [[ $cmd == */* ]]; then
  cmd_path=$(abspath "$cmd")
else
  cmd_path=$(type -P -- "$cmd") || die "COMMAND $cmd is not on PATH; give its path"
  cmd_path=$(abspath "$cmd_path")
fi
[ -f "$cmd_path" ] && [ -x "$cmd_path" ] || die "COMMAND $cmd ($cmd_path) is not an executable file"
copy_paths=()
for p in "${COPIES[@]}"; do
  [ -e "$p" ] || die "--copy=$p does not exist (from $PWD)"
  a=$(abspath "$p")
  case $a in
    /|/proc|/proc/*|/sys|/sys/*|/dev|/dev/*|/.pvemu|/.pvemu/*)
      die "--copy=$p ($a) overlaps what the guest mounts or the harness uses; copy something more specific" ;;
  esac
  copy_paths+=("$a")
done

# --- host tools --------------------------------------------------------------------
export DEBIAN_FRONTEND=noninteractive
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v cpio >/dev/null || need+=(cpio)
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] || die "${need[*]} missing: install them (apt-get install ${need[*]}) or run as root"
  step "apt-get install ${need[*]}"
  { bounded apt-get install -y --no-install-recommends "${need[@]}" ||
    { bounded apt-get update && bounded apt-get install -y --no-install-recommends "${need[@]}"; }
  } >/dev/null 2>&1 || die "apt-get install ${need[*]} failed; install them by hand"
fi

# --- kernel, modules and busybox, cached -------------------------------------------
mkdir -p "$CACHE/debs" 2>/dev/null ||
  die "cannot create the cache $CACHE: run as root or set PVEMU_KVM_VM_CACHE to a writable directory"
# Concurrent runs share the cache: one fetches and unpacks, the others wait.
exec 9>"$CACHE/.lock"
bounded flock 9 || die "waited too long for the cache lock $CACHE/.lock"

# The concrete kernel package behind linux-image-amd64, e.g. linux-image-6.1.0-57-amd64.
resolve_kernel() {
  apt-cache depends linux-image-amd64 2>/dev/null |
    sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p' | head -1
}
kernel_pkg=${PVEMU_KVM_VM_KERNEL_PKG:-$(resolve_kernel)}
if [ -z "$kernel_pkg" ] && [ "$(id -u)" -eq 0 ]; then
  bounded apt-get update >/dev/null 2>&1 || true
  kernel_pkg=$(resolve_kernel)
fi
if [ -z "$kernel_pkg" ]; then
  # Offline, or not Debian: a kernel fetched earlier still does.
  cached=$(ls -t "$CACHE"/debs/linux-image-[0-9]*-amd64_*.deb 2>/dev/null | head -1 || true)
  [ -n "$cached" ] || die "cannot resolve linux-image-amd64 to a kernel package (apt-cache depends linux-image-amd64); set PVEMU_KVM_VM_KERNEL_PKG"
  kernel_pkg=$(basename "$cached"); kernel_pkg=${kernel_pkg%%_*}
fi

# fetch PKG: the path of PKG's .deb in the cache, downloaded once.
fetch() {
  local pkg=$1 deb
  deb=$(ls -t "$CACHE/debs/${pkg}_"*.deb 2>/dev/null | head -1 || true)
  if [ -z "$deb" ]; then
    step "apt-get download $pkg"
    local apt=(apt-get download "$pkg")
    [ "$(id -u)" -eq 0 ] && apt=(apt-get -o APT::Sandbox::User=root download "$pkg")
    (cd "$CACHE/debs" && bounded "${apt[@]}") >/dev/null 2>&1 ||
      { [ "$(id -u)" -eq 0 ] && bounded apt-get update >/dev/null 2>&1 &&
        (cd "$CACHE/debs" && bounded "${apt[@]}") >/dev/null 2>&1; } ||
      die "apt-get download $pkg failed (network, or no such package in the apt sources)"
    deb=$(ls -t "$CACHE/debs/${pkg}_"*.deb | head -1)
  fi
  echo "$deb"
}

kernel_deb=$(fetch "$kernel_pkg")
KDIR=$CACHE/kernel/$(basename "$kernel_deb" .deb)
if [ ! -f "$KDIR/.complete" ]; then
  step "unpack $(basename "$kernel_deb"): vmlinuz and the KVM modules"
  rm -rf "$KDIR" "$KDIR.tmp"
  mkdir -p "$KDIR.tmp/x" "$KDIR/modules"
  bounded dpkg-deb -x "$kernel_deb" "$KDIR.tmp/x" || die "dpkg-deb -x $kernel_deb failed"
  vmlinuz=$(ls "$KDIR.tmp/x"/boot/vmlinuz-* 2>/dev/null | head -1)
  [ -n "$vmlinuz" ] || die "$kernel_deb holds no boot/vmlinuz-*"
  cp "$vmlinuz" "$KDIR/vmlinuz"
  moddir=$(ls -d "$KDIR.tmp/x"/lib/modules/* 2>/dev/null | head -1)
  [ -n "$moddir" ] || die "$kernel_deb holds no lib/modules/"
  declare -A modpath=()
  while IFS= read -r -d '' ko; do
    name=${ko##*/}; name=${name%%.ko*}
    modpath[${name//-/_}]=$ko
  done < <(find "$moddir" \( -name '*.ko' -o -name '*.ko.xz' -o -name '*.ko.zst' \) -print0)
  # add_module NAME LIST: appends NAME's dependencies, then NAME, to LIST
  # (a file), decompressed into $KDIR/modules. The dependencies come from the
  # module's own .modinfo (depends=), so no depmod is needed.
  add_module() {
    local key=${1//-/_} list=$2 ko
    grep -qx "$key" "$list" 2>/dev/null && return 0
    ko=${modpath[$key]:-}
    [ -n "$ko" ] || die "kernel module $1 not found in $(basename "$kernel_deb")"
    local out=$KDIR/modules/$key.ko
    case $ko in
      *.ko.xz) xz -dc "$ko" >"$out" || die "cannot decompress $ko (install xz-utils)" ;;
      *.ko.zst) zstd -dqc "$ko" >"$out" || die "cannot decompress $ko (install zstd)" ;;
      *) cp "$ko" "$out" ;;
    esac
    local deps d
    deps=$(tr '\0' '\n' <"$out" | sed -n 's/^depends=//p' | head -1)
    for d in ${deps//,/ }; do add_module "$d" "$list"; done
    echo "$key" >>"$list"
  }
  for vendor in amd intel; do
    : >"$KDIR/kvm-$vendor.load"
    add_module "kvm-$vendor" "$KDIR/kvm-$vendor.load"
  done
  # /dev/cpu/N/msr, for `pvemu-vm --host=linux`; optional.
  : >"$KDIR/msr.load"
  if [ -n "${modpath[msr]:-}" ]; then add_module msr "$KDIR/msr.load"; fi
  rm -rf "$KDIR.tmp"
  touch "$KDIR/.complete"
fi

busybox_deb=$(fetch busybox-static)
BDIR=$CACHE/busybox/$(basename "$busybox_deb" .deb)
if [ ! -f "$BDIR/.complete" ]; then
  step "unpack $(basename "$busybox_deb")"
  rm -rf "$BDIR" "$BDIR.tmp"
  mkdir -p "$BDIR.tmp" "$BDIR"
  dpkg-deb -x "$busybox_deb" "$BDIR.tmp" || die "dpkg-deb -x $busybox_deb failed"
  cp "$BDIR.tmp/bin/busybox" "$BDIR/busybox" || die "$busybox_deb holds no bin/busybox"
  rm -rf "$BDIR.tmp"
  touch "$BDIR/.complete"
fi
exec 9>&-  # the cache is complete; release the lock

# --- initramfs -----------------------------------------------------------------------
W=$(mktemp -d "${TMPDIR:-/tmp}/pvemu-kvm-vm.XXXXXX")
QEMU_PID=
cleanup() {
  if [ -n "$QEMU_PID" ]; then kill "$QEMU_PID" 2>/dev/null || true; fi
  rm -rf "$W"
}
trap cleanup EXIT
trap 'say "interrupted"; exit 99' INT TERM HUP
IR=$W/root
mkdir -p "$IR"/{.pvemu/modules,.pvemu/out,proc,sys,dev,run,root,etc,bin}
mkdir -m 1777 "$IR/tmp"
step "initramfs in $W"

cp "$BDIR/busybox" "$IR/.pvemu/busybox"
cp "$KDIR"/modules/*.ko "$IR/.pvemu/modules/"
cp "$KDIR"/*.load "$IR/.pvemu/"

# put PATH: copies the file PATH (following symlinks) to the same path in the guest.
put() {
  mkdir -p "$IR$(dirname "$1")"
  cp -L --preserve=mode "$1" "$IR$1" || die "cannot copy $1 into the initramfs"
}
# is_elf FILE: whether FILE starts with the ELF magic (NULs dropped first:
# bash cannot hold them).
is_elf() { [ "$(head -c4 "$1" 2>/dev/null | tr -d '\0')" = $'\x7fELF' ]; }
elves=()
put "$cmd_path"
elves+=("$cmd_path")
# A script's interpreter comes too (#!/bin/sh, #!/usr/bin/env python3).
if [ "$(head -c2 "$cmd_path")" = '#!' ]; then
  read -r interp interp_arg < <(head -1 "$cmd_path" | cut -c3-) || true
  if [ "${interp:-}" = /usr/bin/env ] && [ -n "${interp_arg:-}" ]; then
    put /usr/bin/env; elves+=(/usr/bin/env)
    interp=$(type -P -- "${interp_arg%% *}") || die "the interpreter $interp_arg of $cmd_path is not on PATH"
  fi
  [ -x "${interp:-}" ] || die "the interpreter ${interp:-?} of $cmd_path is not an executable"
  put "$interp"; elves+=("$interp")
fi
for a in "${copy_paths[@]}"; do
  mkdir -p "$IR$(dirname "$a")"
  # -H: a symlink named on the command line is followed; inside a directory
  # symlinks stay symlinks.
  cp -a -H "$a" "$IR$(dirname "$a")/" || die "cannot copy --copy=$a into the initramfs"
  if [ -d "$a" ]; then
    while IFS= read -r -d '' f; do
      is_elf "$f" && elves+=("$f")
    done < <(find -H "$a" -type f \( -perm -u+x -o -name '*.so' -o -name '*.so.*' \) -print0)
  elif is_elf "$a"; then
    elves+=("$a")
  fi
done
# Shared libraries: ldd's paths (the ones the loader would use here), the
# loader itself, and ld.so.cache, which maps names to those same paths.
# (ldd fails for a file that is not dynamic, which is no error here.)
ldd_out=$(printf '%s\0' "${elves[@]}" | xargs -0 ldd 2>/dev/null || true)
libs=$(sed -n 's/.*=> \(\/[^ ]*\) (0x.*/\1/p; s/^[[:space:]]*\(\/[^ ]*\) (0x.*/\1/p' <<<"$ldd_out" | sort -u)
missing=$(sed -n 's/^[[:space:]]*\([^ ]*\) => not found.*/\1/p' <<<"$ldd_out" | sort -u)
[ -z "$missing" ] || say "warning: shared libraries not found here, so not in the guest either: $(tr '\n' ' ' <<<"$missing")"
for lib in $libs; do
  lib=$(realpath -s -m -- "$lib")  # RUNPATH $ORIGIN/.. gives dir/../lib.so
  [ -e "$IR$lib" ] || put "$lib"
done
[ -f /etc/ld.so.cache ] && cp /etc/ld.so.cache "$IR/etc/"
# system() and popen() need /bin/sh; busybox's does if none was copied.
[ -e "$IR/bin/sh" ] || ln -s /.pvemu/busybox "$IR/bin/sh"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$IR/etc/passwd"
printf 'root:x:0:\n' >"$IR/etc/group"
mkdir -p "$IR$PWD"

# squote STRING: STRING as one single-quoted shell word.
squote() { printf "'%s'" "${1//\'/\'\\\'\'}"; }
{
  echo "export HOME=/root"
  echo "export PATH=$(squote "$PATH:/.pvemu/bin")"
  while IFS= read -r name; do
    [[ $name =~ ^(PVEMU|GTEST)_ ]] && echo "export $name=$(squote "${!name}")"
  done < <(compgen -e)
} >"$IR/.pvemu/env"
{
  printf 'cd %s || exit 99\nexec' "$(squote "$PWD")"
  printf ' %s' "$(squote "$cmd")"
  shift
  for arg in "$@"; do printf ' %s' "$(squote "$arg")"; done
  echo
} >"$IR/.pvemu/run"

# The guest's /init. It reports through a tar archive on ttyS1 (raw mode, so
# every byte arrives as written): stdout, stderr, status, and either nokvm
# (why /dev/kvm is missing) or timedout.
cat >"$IR/init" <<'EOF'
#!/.pvemu/busybox sh
/.pvemu/busybox mkdir -p /.pvemu/bin
/.pvemu/busybox --install -s /.pvemu/bin
export PATH=/.pvemu/bin
OUT=/.pvemu/out
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
ifconfig lo 127.0.0.1 up 2>/dev/null
stty -F /dev/ttyS1 raw -echo

report() {
  cd "$OUT" && tar -cf /dev/ttyS1 .
  poweroff -f
}

vendor=amd
grep -qw vmx /proc/cpuinfo && vendor=intel
for m in $(cat /.pvemu/kvm-$vendor.load /.pvemu/msr.load); do
  insmod /.pvemu/modules/$m.ko 2>>"$OUT/insmod.log" || echo "insmod $m.ko failed" >>"$OUT/insmod.log"
done
if [ ! -c /dev/kvm ]; then
  {
    echo "no /dev/kvm in the guest after loading kvm-$vendor ($(grep -ow 'svm\|vmx\|npt' /proc/cpuinfo | sort -u | tr '\n' ' ')):"
    cat "$OUT/insmod.log" 2>/dev/null
    dmesg | grep -i 'kvm\|svm\|vmx' | tail -5
  } >"$OUT/nokvm"
  report
fi

. /.pvemu/env
echo "run-in-kvm-vm: running $(cat /.pvemu/run | tail -1)" >/dev/console
( . /.pvemu/run ) >"$OUT/stdout" 2>"$OUT/stderr" </dev/null &
pid=$!
# The command gets the bound minus a margin for reporting back.
( sleep "${pvemu_budget:-600}"; echo "${pvemu_budget:-600}" >"$OUT/timedout"; kill -KILL $pid ) 2>/dev/null &
watchdog=$!
wait $pid
echo $? >"$OUT/status"
kill $watchdog 2>/dev/null
report
EOF
chmod 755 "$IR/init"

(cd "$IR" && find . -print0 | cpio --null -o -H newc -R 0:0 --quiet) >"$W/initrd.cpio" ||
  die "cpio failed building $W/initrd.cpio"
size_mib=$(( $(stat -c %s "$W/initrd.cpio") >> 20 ))
step "initramfs: ${size_mib} MiB, ${#elves[@]} executables, $(echo "$libs" | wc -w) libraries"
[ $((size_mib * 3)) -lt "$MEMORY" ] ||
  say "warning: the initramfs (${size_mib} MiB) is large for ${MEMORY} MiB of guest RAM; raise PVEMU_KVM_VM_MEMORY or copy less"

# --- boot ---------------------------------------------------------------------------------
console_tail() {
  if [ "$VERBOSE" = 1 ]; then
    sed 's/^/  console| /' "$W/console.log" >&2
  else
    say "the guest's console, last 30 lines:"
    tail -30 "$W/console.log" | sed 's/^/  console| /' >&2
  fi
  if [ -s "$W/qemu.log" ]; then sed 's/^/  qemu| /' "$W/qemu.log" >&2; fi
  return 0
}

# The guest kernel under TCG sometimes locks up: one CPU stops answering
# IPIs and the other waits for it forever (soft lockups and RCU stalls on the
# console; seen in 2 of about 25 runs while the host was overloaded, not tied
# to any command). softlockup_panic and panic_on_rcu_stall turn that into a
# panic, which ends QEMU (panic=-1 with -no-reboot), and the run starts again
# on a fresh boot, PVEMU_KVM_VM_RETRIES times at most, within the same bound.
attempt=0
while :; do
  attempt=$((attempt + 1))
  left=$(remaining)
  # The command's own budget: what is left, minus boot (~5-20 s under TCG)
  # and the report.
  budget=$((left > 90 ? left - 45 : left / 2))
  [ "$budget" -ge 1 ] || budget=1
  step "boot $(basename "$KDIR") under qemu-system-x86_64 (-accel $ACCEL, -cpu $CPU_MODEL, -smp $SMP, ${MEMORY} MiB), attempt $attempt; command budget ${budget}s"
  boot_start=$SECONDS
  rm -rf "$W/console.log" "$W/report.tar" "$W/out"
  # tsc=reliable: qemu64 has no invariant TSC, so the kernel would fall back
  # to the HPET, and every clock_gettime would be an emulated MMIO read
  # (1.8 us against 65 ns measured); TCG derives every vCPU's TSC from the
  # host's monotonic clock, so it is stable. mitigations=off: nothing to
  # protect in a throwaway guest, and fewer emulated barriers on each exit.
  timeout -k 5 "$left" qemu-system-x86_64 \
    -machine q35 -accel "$ACCEL" -cpu "$CPU_MODEL" -m "$MEMORY" -smp "$SMP" \
    -nodefaults -no-user-config -display none -no-reboot \
    -serial "file:$W/console.log" -serial "file:$W/report.tar" \
    -kernel "$KDIR/vmlinuz" -initrd "$W/initrd.cpio" \
    -append "console=ttyS0 quiet panic=-1 softlockup_panic=1 sysctl.kernel.panic_on_rcu_stall=1 $KERNEL_ARGS pvemu_budget=$budget" \
    </dev/null >"$W/qemu.log" 2>&1 &
  QEMU_PID=$!
  set +e
  wait "$QEMU_PID"
  qemu_rc=$?
  set -e
  QEMU_PID=
  step "QEMU exited $qemu_rc after $((SECONDS - boot_start))s"

  if [ "$qemu_rc" = 124 ] || [ "$qemu_rc" = 137 ]; then
    console_tail
    die "the guest did not finish within PVEMU_KVM_VM_TIMEOUT=${TIMEOUT}s; QEMU stopped"
  fi
  mkdir -p "$W/out"
  if tar -xf "$W/report.tar" -C "$W/out" 2>/dev/null &&
     { [ -f "$W/out/status" ] || [ -f "$W/out/nokvm" ]; }; then
    break
  fi
  if grep -qE 'soft lockup|rcu_.*detected stall|self-detected stall' "$W/console.log" &&
     [ "$attempt" -le "${PVEMU_KVM_VM_RETRIES:-2}" ]; then
    say "the guest kernel locked up (attempt $attempt; an emulation flake, not the command's doing); booting again"
    [ "$VERBOSE" = 1 ] && console_tail
    continue
  fi
  console_tail
  die "the guest did not report back (QEMU exit $qemu_rc; a kernel panic or a crash of /init?)"
done
[ "$VERBOSE" = 1 ] && console_tail
if [ -f "$W/out/nokvm" ]; then
  sed 's/^/  /' "$W/out/nokvm" >&2
  say "skipping: no usable /dev/kvm inside the QEMU guest (cpu $CPU_MODEL)"
  exit 77
fi
cat "$W/out/stdout"
cat "$W/out/stderr" >&2
if [ -f "$W/out/timedout" ]; then
  die "the command ran past its budget of $(cat "$W/out/timedout")s (PVEMU_KVM_VM_TIMEOUT=${TIMEOUT}s minus boot); killed it"
fi
exit "$(cat "$W/out/status")"
