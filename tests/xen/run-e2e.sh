#!/usr/bin/env bash
# End-to-end test of pvemud on a real Xen: boots Debian's Xen 4.17 hypervisor
# under qemu-system-x86_64 (software emulation) with Debian's kernel as PV
# dom0 and a busybox initramfs holding the built pvemud and pvemuctl; the
# initramfs's /init (tests/xen/init.sh) runs `pvemud --host=xen` and checks it
# from inside dom0. Exit 0 only when the serial log says "E2E PASS".
#
# Usage (as root, from anywhere): tests/xen/run-e2e.sh
# Environment:
#   PVEMU_BUILD_DIR     the meson build dir holding pvemud/pvemuctl (default ./build)
#   PVEMU_XEN_CACHE     downloaded and unpacked packages (default /var/cache/pvemu-xen-e2e)
#   PVEMU_XEN_WORK      initramfs, xen image, serial log (default $PVEMU_XEN_CACHE/work)
#   PVEMU_E2E_TIMEOUT   bound on the whole run, seconds (default 600)
#   PVEMU_E2E_QEMU_TIMEOUT  bound on the QEMU boot, seconds (default 420)
#   PVEMU_E2E_CPU       QEMU -cpu model (default qemu64,+svm,+npt: SVM and
#                       nested paging give Xen HVM with HAP, which the
#                       vm_event check needs; `max` crashes dom0)
#
# Packages it needs (qemu-system-x86, cpio) are installed with apt-get; the
# Xen hypervisor, the kernel and busybox-static are fetched with
# `apt-get download` into the cache and unpacked there, never installed on
# this machine (no bootloader or initramfs hooks run). A second run reuses
# the cache. The normal build and test (scripts/install-deps, scripts/test)
# download none of this.
set -euo pipefail

if [ -z "${PVEMU_E2E_BOUNDED:-}" ]; then
  export PVEMU_E2E_BOUNDED=1
  exec timeout -k 10 "${PVEMU_E2E_TIMEOUT:-600}" "$0" "$@"
fi

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${PVEMU_BUILD_DIR:-$ROOT/build}
CACHE=${PVEMU_XEN_CACHE:-/var/cache/pvemu-xen-e2e}
WORK=${PVEMU_XEN_WORK:-$CACHE/work}
QEMU_TIMEOUT=${PVEMU_E2E_QEMU_TIMEOUT:-420}
CPU_MODEL=${PVEMU_E2E_CPU:-qemu64,+svm,+npt}
START=$(date +%s)

step() { echo "==> [$(( $(date +%s) - START ))s] $*"; }
die() { echo "E2E FAIL: $*" >&2; exit 1; }

if [ "$(id -u)" -ne 0 ]; then
  # 77: meson's "skipped"; nothing else stops this test from running.
  echo "E2E SKIP: run as root (it calls apt-get and boots QEMU)" >&2
  exit 77
fi
export DEBIAN_FRONTEND=noninteractive

# --- 1. packages -------------------------------------------------------------
step "host tools: qemu-system-x86, cpio, gcc, binutils"
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v cpio >/dev/null || need+=(cpio)
command -v cc >/dev/null || need+=(gcc)
command -v strings >/dev/null || need+=(binutils)
if [ ${#need[@]} -gt 0 ]; then
  echo "    apt-get install ${need[*]}"
  apt-get install -y --no-install-recommends "${need[@]}" >/dev/null ||
    { apt-get update >/dev/null && apt-get install -y --no-install-recommends "${need[@]}" >/dev/null; } ||
    die "apt-get install ${need[*]} failed"
fi

# The concrete kernel package behind linux-image-amd64 (linux-image-6.1.0-N-amd64).
kernel_pkg=${PVEMU_E2E_KERNEL_PKG:-}
if [ -z "$kernel_pkg" ]; then
  kernel_pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
               sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p' | head -1)
  if [ -z "$kernel_pkg" ]; then
    apt-get update >/dev/null || true
    kernel_pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
                 sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p' | head -1)
  fi
  [ -n "$kernel_pkg" ] || die "cannot resolve linux-image-amd64 to a kernel package"
fi

# fetch PKG DIRNAME: apt-get download PKG into the cache (once), unpack it
# into $CACHE/DIRNAME (once).
fetch() {
  local pkg=$1 dir=$CACHE/$2
  mkdir -p "$CACHE/debs"
  local deb
  deb=$(ls "$CACHE/debs/${pkg}_"*.deb 2>/dev/null | head -1 || true)
  if [ -z "$deb" ]; then
    echo "    apt-get download $pkg"
    (cd "$CACHE/debs" && apt-get -o APT::Sandbox::User=root download "$pkg" >/dev/null) ||
      { apt-get update >/dev/null &&
        (cd "$CACHE/debs" && apt-get -o APT::Sandbox::User=root download "$pkg" >/dev/null); } ||
      die "apt-get download $pkg failed"
    deb=$(ls "$CACHE/debs/${pkg}_"*.deb | head -1)
  fi
  if [ ! -f "$dir/.unpacked-$(basename "$deb")" ]; then
    rm -rf "$dir"
    mkdir -p "$dir"
    dpkg-deb -x "$deb" "$dir"
    touch "$dir/.unpacked-$(basename "$deb")"
  fi
  echo "    $(basename "$deb")"
}
step "Debian packages into $CACHE (cached)"
fetch xen-hypervisor-4.17-amd64 xen
fetch "$kernel_pkg" kernel
fetch busybox-static busybox

xen_gz=$(ls "$CACHE"/xen/boot/xen-4.17-amd64.gz)
vmlinuz=$(ls "$CACHE"/kernel/boot/vmlinuz-* | head -1)
kver=${vmlinuz##*/vmlinuz-}
moddir=$CACHE/kernel/lib/modules/$kver
[ -f "$xen_gz" ] && [ -f "$vmlinuz" ] && [ -d "$moddir" ] || die "unpacked packages incomplete"

# --- 2. pvemu ------------------------------------------------------------------
step "build pvemud, pvemuctl in $BUILD"
# As scripts/build (configure once with -Dwerror=true), but only the two
# binaries and at most PVEMU_JOBS (2) compile jobs.
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" "$ROOT" -Dwerror=true | tail -3
fi
ninja -C "$BUILD" -j"${PVEMU_JOBS:-2}" server/pvemud client/pvemuctl | tail -1
for b in server/pvemud client/pvemuctl; do
  [ -x "$BUILD/$b" ] || die "$BUILD/$b missing after the build"
done
[[ "$(ldd "$BUILD/server/pvemud")" == *libxenctrl* ]] ||
  die "pvemud is built without Xen (libxen-dev missing at configure time?); reconfigure with -Dxen=enabled"

mkdir -p "$WORK"
step "build the probes: xen-msr-probe (gcc, libxenctrl), xen-monitor-probe (pvemu's vm_event ring code), xen-hvm-guest and its guest, xl-cfg-check"
cc -O2 -Wall -Wextra -Werror -o "$WORK/xen-msr-probe" "$ROOT/tests/xen/msr_probe.c" -lxenctrl
# shellcheck disable=SC2046
c++ -std=gnu++20 -O1 -Wall -Wextra -Werror -DPVEMU_HAVE_XEN=1 -I"$ROOT" \
  -o "$WORK/xen-monitor-probe" "$ROOT/tests/xen/monitor_probe.cc" \
  "$ROOT/server/xen/xen_vm_event_libxc.cc" \
  $(pkg-config --cflags --libs absl_status absl_statusor absl_strings) \
  -lxenctrl -lxenevtchn
c++ -std=gnu++20 -O1 -Wall -Wextra -Werror -I"$ROOT" \
  -o "$WORK/xen-hvm-guest" "$ROOT/tests/xen/hvm_guest.cc" -lxenctrl
# Xen's own xl.cfg parser (libxlutil, libxenlight), for xen-config's fragment.
cc -O2 -Wall -Wextra -Werror -o "$WORK/xl-cfg-check" "$ROOT/tests/xen/xl_cfg_check.c" \
  -lxlutil -lxenlight
# The guest: 32-bit code linked at 0x1000, cut to a flat image.
as --32 -o "$WORK/hvm-guest.o" "$ROOT/tests/xen/hvm_guest.S"
ld -m elf_i386 -Ttext=0x1000 -e _start -o "$WORK/hvm-guest.elf" "$WORK/hvm-guest.o"
objcopy -O binary -j .text "$WORK/hvm-guest.elf" "$WORK/hvm-guest.bin"

# --- 3. initramfs --------------------------------------------------------------
step "initramfs: busybox, kernel modules, pvemud, pvemuctl and their libraries"
IR=$WORK/initramfs
rm -rf "$IR"
mkdir -p "$IR"/{bin,sbin,usr/bin,usr/sbin,etc/e2e,proc,sys,dev,run,tmp,var/lib,lib/modules,lib64,lib/x86_64-linux-gnu}
cp "$CACHE/busybox/bin/busybox" "$IR/bin/busybox"
ln -s busybox "$IR/bin/sh"

# Modules with their dependencies (from .modinfo "depends="), deps first.
declare -A modpath=()
while IFS= read -r -d '' ko; do
  name=$(basename "$ko" .ko)
  modpath[${name//-/_}]=${ko#"$moddir"/}
done < <(find "$moddir" -name '*.ko' -print0)
declare -A loaded=()
order=()
add_module() {
  local key=${1//-/_}
  [ -n "${loaded[$key]:-}" ] && return 0
  local rel=${modpath[$key]:-}
  [ -n "$rel" ] || { grep -q "/${1}.ko$" "$moddir/modules.builtin" && return 0; die "kernel module $1 not found in $kver"; }
  loaded[$key]=1
  local deps
  deps=$(strings -a "$moddir/$rel" | sed -n 's/^depends=//p' | head -1)
  local d
  for d in ${deps//,/ }; do add_module "$d"; done
  order+=("$rel")
}
for m in xen-privcmd xen-evtchn xenfs msr; do add_module "$m"; done
for rel in "${order[@]}"; do
  mkdir -p "$IR/lib/modules/$(dirname "$rel")"
  cp "$moddir/$rel" "$IR/lib/modules/$rel"
  echo "$rel"
done >"$IR/etc/e2e-modules"
echo "    modules: $(tr '\n' ' ' <"$IR/etc/e2e-modules")"

# Binaries and every library ldd lists, plus the dynamic loader.
cp "$BUILD/server/pvemud" "$BUILD/client/pvemuctl" "$WORK/xen-msr-probe" \
   "$WORK/xen-monitor-probe" "$WORK/xen-hvm-guest" "$WORK/xl-cfg-check" "$IR/usr/bin/"
libs=$(for b in "$IR"/usr/bin/*; do ldd "$b"; done |
       sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p; s/^[[:space:]]*\(\/[^ ]*\) (0x.*/\1/p' | sort -u)
nlibs=0
for lib in $libs; do
  case $lib in
    */ld-linux-x86-64.so.2) dest=$IR/lib64/ld-linux-x86-64.so.2 ;;
    *) dest=$IR/lib/x86_64-linux-gnu/$(basename "$lib") ;;
  esac
  cp -L "$lib" "$dest"
  nlibs=$((nlibs + 1))
done
echo "    $nlibs shared libraries"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$IR/etc/passwd"
printf 'root:x:0:\n' >"$IR/etc/group"
cp "$ROOT/tests/xen/traps/"*.textproto "$ROOT/tests/xen/guest-policy.textproto" \
   "$WORK/hvm-guest.bin" "$IR/etc/e2e/"
cp "$ROOT/tests/xen/init.sh" "$IR/init"
chmod 755 "$IR/init"
(cd "$IR" && find . | cpio -o -H newc --quiet | gzip -1) >"$WORK/initrd.cpio.gz"
echo "    $(du -h "$WORK/initrd.cpio.gz" | cut -f1) $WORK/initrd.cpio.gz"
gunzip -c "$xen_gz" >"$WORK/xen-4.17-amd64"

# --- 4. boot ---------------------------------------------------------------------
# The console's control characters (SeaBIOS's and the kernel's escape
# sequences, CRs) are dropped: the log is read by grep, and meson copies
# this output into its JUnit XML, where they are not allowed.
LOG=$WORK/serial.log
step "boot Xen 4.17 + dom0 $kver under qemu-system-x86_64 (TCG, -cpu $CPU_MODEL, bound ${QEMU_TIMEOUT}s); serial log $LOG"
boot_start=$(date +%s)
set +e
timeout -k 5 "$QEMU_TIMEOUT" qemu-system-x86_64 \
  -machine q35 -cpu "$CPU_MODEL" -m 2048 -smp 2 -nographic -no-reboot \
  -kernel "$WORK/xen-4.17-amd64" \
  -append "console=com1 com1=115200 dom0_mem=1024M guest_loglvl=all" \
  -initrd "$vmlinuz console=hvc0,$WORK/initrd.cpio.gz" \
  </dev/null 2>&1 | LC_ALL=C tr -d '\000-\010\013-\037\177' | tee "$LOG" | sed -u 's/^/  | /'
qemu_rc=${PIPESTATUS[0]}
set -e
boot_secs=$(( $(date +%s) - boot_start ))

# --- 5. verdict ------------------------------------------------------------------
step "verdict (QEMU exit $qemu_rc after ${boot_secs}s)"
[ "$qemu_rc" = 124 ] && echo "    QEMU was stopped by the ${QEMU_TIMEOUT}s bound"
grep -E '^E2E CHECK (PASS|FAIL):' "$LOG" | sed 's/^/    /' || true
npass=$(grep -c '^E2E CHECK PASS:' "$LOG" || true)
nfail=$(grep -c '^E2E CHECK FAIL:' "$LOG" || true)
total=$(( $(date +%s) - START ))
if grep -q '^E2E PASS$' "$LOG" && [ "$nfail" = 0 ] && [ "$npass" -gt 0 ]; then
  echo "E2E PASS: $npass checks passed in dom0 on Xen; boot+checks ${boot_secs}s, total ${total}s"
  exit 0
fi
echo "E2E FAIL: $npass passed, $nfail failed, $( grep -q '^E2E FAIL$' "$LOG" && echo 'dom0 reported failure' || echo 'no verdict from dom0'); total ${total}s; see $LOG"
exit 1
