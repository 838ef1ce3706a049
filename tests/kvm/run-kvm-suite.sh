#!/bin/sh
# Runs one test binary of the kvm suite where KVM guests can run:
#   run-kvm-suite.sh [--copy=PATH]... -- TEST_BINARY [ARGS]...
# - /dev/kvm usable here: the binary runs directly.
# - otherwise: inside a QEMU guest with nested KVM (run-in-kvm-vm.sh, beside
#   this script), which gets the binary, its libraries and each --copy path
#   at the same absolute paths, and the PVEMU_* and GTEST_* variables.
# - neither (run-in-kvm-vm.sh exits 77: no KVM for it either): the binary
#   runs here anyway, so each test prints why it skips, and the result is 77
#   (meson's SKIP) unless a test that needs no KVM failed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
copies=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    --copy=*) copies="$copies $1" ;;
    *) echo "run-kvm-suite: unknown argument $1 (usage: [--copy=PATH]... -- TEST [ARGS])" >&2; exit 2 ;;
  esac
  shift
done
if [ $# -lt 2 ]; then
  echo "run-kvm-suite: usage: run-kvm-suite.sh [--copy=PATH]... -- TEST_BINARY [ARGS]..." >&2
  exit 2
fi
shift  # the --

if [ -c /dev/kvm ] && [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
  exec "$@"
fi

if [ ! -x "$here/run-in-kvm-vm.sh" ]; then
  echo "run-kvm-suite: /dev/kvm is not usable here and $here/run-in-kvm-vm.sh is missing" >&2
  exit 1
fi
echo "run-kvm-suite: /dev/kvm is not usable here; running $1 in a QEMU guest with nested KVM" >&2
# The guest has 2 CPUs: the SHADOW test runs 2 vCPUs, and KVM_CAP_NR_VCPUS
# follows the guest's CPU count. $copies is split on purpose (one word each).
# PVEMU_KVM_NESTED_TCG tells the tests that every instruction, theirs, the
# daemon's and the runner's, is emulated in software: timing bounds meant
# for real hardware (the 100 ms edit latency) are relaxed there, and say so.
# shellcheck disable=SC2086
PVEMU_KVM_NESTED_TCG=1 "$here/run-in-kvm-vm.sh" --smp=2 $copies -- "$@"
status=$?
if [ "$status" -ne 77 ]; then
  exit "$status"
fi

echo "run-kvm-suite: no nested KVM either (run-in-kvm-vm.sh exited 77); running $1 here so each test says why it skips" >&2
"$@"
status=$?
if [ "$status" -ne 0 ]; then
  exit "$status"
fi
exit 77
