#!/bin/bash
# Pack a directory's files into parts the device tool brings back (at most 8 files per call, 16 MiB each, 64 MiB
# in all): one uncompressed tar (the profiler traces are gzipped already) cut into PREFIX.tar.part00, part01, ...
# of PART_MIB (default 15) MiB, at most MAXPARTS (default 4) of them. Rank-0 files come first (names without
# .TP-<r>), so when the parts would be too many, what is cut off is other ranks' traces; the count left on the
# machine is printed. Put back together here with: cat PREFIX.tar.part* | tar -xf -
#   bash benchmark/lab/pack_parts.sh DIR PREFIX [MAXPARTS]
# Exit 0 (also for an empty or missing DIR: nothing to bring back), 2 bad arguments.
set -u
dir=${1:-}; prefix=${2:-}; max=${3:-4}; part=${PART_MIB:-15}
[ -n "$dir" ] && [ -n "$prefix" ] || { echo "usage: pack_parts.sh DIR PREFIX [MAXPARTS]"; exit 2; }
[[ "$max" =~ ^[1-9][0-9]*$ ]] || { echo "pack_parts: MAXPARTS=$max: expected a whole number >= 1"; exit 2; }
[[ "$part" =~ ^[1-9][0-9]*$ ]] && [ "$part" -le 16 ] || { echo "pack_parts: PART_MIB=$part: expected 1-16"; exit 2; }
[ -d "$dir" ] || { echo "pack_parts: no $dir: nothing to pack"; exit 0; }
list=$(mktemp)
trap 'rm -f "$list"' EXIT
( cd "$dir" && { find . -type f ! -name '*.TP-[1-9]*' | LC_ALL=C sort; find . -type f -name '*.TP-[1-9]*' | LC_ALL=C sort; } ) > "$list"
n=$(grep -c . "$list")
[ "$n" -gt 0 ] || { echo "pack_parts: $dir holds no files: nothing to pack"; exit 0; }
bytes=$(cd "$dir" && tr '\n' '\0' < "$list" | xargs -0 stat -c %s | awk '{s += $1} END {print s + 0}')
rm -f "$prefix".tar.part*
tar -cf - -C "$dir" -T "$list" | split -b "${part}M" -d -a 2 - "$prefix.tar.part"
parts=( "$prefix".tar.part* )
if [ "${#parts[@]}" -gt "$max" ]; then
  cut=$(( ${#parts[@]} - max ))
  rm -f "${parts[@]:$max}"
  echo "pack_parts: $n files, $(( bytes / 1048576 )) MiB: kept the first $max of ${#parts[@]} parts of $part MiB;" \
       "$cut part(s) (the last files, other ranks' traces first) stay on the machine"
else
  echo "pack_parts: $n files, $(( bytes / 1048576 )) MiB in ${#parts[@]} part(s) of <= $part MiB: $prefix.tar.part*"
fi
