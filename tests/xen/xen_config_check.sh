#!/bin/sh
# The xl.cfg `pvemuctl xen-config` prints, read by Xen's own parser
# (xl_cfg_check: libxlutil + libxenlight as xl uses them): every form it
# emits must pass, and a corrupted fragment must fail, so this test can fail.
# Usage: xen_config_check.sh PVEMUCTL XL_CFG_CHECK POLICY
set -eu
pvemuctl=$1 check=$2 policy=$3
dir=$(mktemp -d "${TMPDIR:-/tmp}/pvemu-xen-config.XXXXXX")
trap 'rm -rf "$dir"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

for domain in 1 2; do
  "$pvemuctl" xen-config --domain=$domain --policy="$policy" > "$dir/d$domain.cfg" ||
    fail "pvemuctl xen-config --domain=$domain exited $?"
  "$check" "$dir/d$domain.cfg" > "$dir/d$domain.out" 2>&1 || {
    cat "$dir/d$domain.cfg" "$dir/d$domain.out" >&2
    fail "xl_cfg_check refused domain $domain's fragment"
  }
done
cat "$dir/d1.cfg" "$dir/d1.out"

# What Xen's parser read is what pvemu meant.
expect() { grep -qxF -- "$2" "$dir/$1.out" || fail "$1: xl_cfg_check did not print '$2'"; }
expect d1 "msr_relaxed: true"
expect d1 "tsc_mode: always_emulate"
expect d1 "cpuid: 4 items, 4 policy entries"
expect d1 "cpuid item 0: 0x1:ecx=0xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx,edx=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx1"
expect d1 "cpuid item 2: 0x7,0x0:ebx=xxxxxxxxxxxxxxxxxxxxxxxxxxx0xxxx"
expect d2 "msr_relaxed: false"
expect d2 "tsc_mode: native"
grep -q '^# not expressible: .*xen_config.textproto:15: CPUID leaf 0x40000000' "$dir/d1.cfg" ||
  fail "the hypervisor leaf is not reported with its FILE:LINE"

# A register string one character short (31) must be refused, naming the item.
sed 's/edx=x\{31\}1/edx=x\{30\}1/' "$dir/d1.cfg" > "$dir/short.cfg"
cmp -s "$dir/d1.cfg" "$dir/short.cfg" && fail "the corruption did not apply"
if "$check" "$dir/short.cfg" > "$dir/short.out" 2>&1; then
  fail "xl_cfg_check accepted a 31-character register string"
fi
grep -q 'cpuid item 0 .*exactly 32 characters' "$dir/short.out" ||
  { cat "$dir/short.out" >&2; fail "the refusal does not name the item and the error"; }

# A character the domain build refuses.
sed 's/edx=x\{31\}1/edx=x\{31\}z/' "$dir/d1.cfg" > "$dir/char.cfg"
if "$check" "$dir/char.cfg" > /dev/null 2>&1; then
  fail "xl_cfg_check accepted 'z' in a register string"
fi
echo "PASS"
