#!/bin/sh
# Assembles one test guest into the flat image pvemu-vm loads at 0x100000:
#   assemble.sh AS OBJCOPY READELF INCLUDE_DIR GUEST.S GUEST.bin
# There is no link step, so an absolute address in the guest would be left
# as a relocation and silently read as 0 in the image; an object with any
# relocation is refused (lib.inc: everything is RIP-relative).
set -eu
as=$1 objcopy=$2 readelf=$3 include_dir=$4 source=$5 output=$6
object="$output.o"
"$as" --64 -I "$include_dir" -o "$object" "$source"
relocations=$(LC_ALL=C "$readelf" -r "$object")
case "$relocations" in
  *"There are no relocations"*) ;;
  *)
    echo "$source: the image must need no relocation (address memory RIP-relative):" >&2
    echo "$relocations" >&2
    rm -f "$object"
    exit 1
    ;;
esac
"$objcopy" -O binary -j .text "$object" "$output"
rm -f "$object"
