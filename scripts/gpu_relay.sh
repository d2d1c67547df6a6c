#!/usr/bin/env bash
# Bring a file larger than one device call carries (64 MiB: working tree plus carried paths) to the GPU
# machine in calls issued back to back (the recipe of ../shared/gpu/README.md): split it into parts of
# RELAY_PART_MIB (default 48) MiB, each in a folder of its own under .relay/ (git-ignored through
# info/exclude), and print the file's sha256 and the exact calls: each call but the last carries one part
# and parks it under /tmp/relay on the machine (which keeps /tmp while it stays warm, ~30 s after a call);
# the last carries the last part, joins the parts, checks the sha256 (exit 3: the machine was given back
# between the calls, do them all again) and then runs your command. Later calls while the machine stays
# warm find /tmp/relay/NAME and carry nothing for it.
#
#   bash scripts/gpu_relay.sh .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf ['COMMAND run after the join']
#
# The last call carries its part and the working tree, so wheels (make gpu-bundle) go in a further call.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || [ ! -f "$1" ]; then
  echo "usage: scripts/gpu_relay.sh FILE ['COMMAND after the join']  (FILE: an existing file)" >&2; exit 2
fi
FILE=$1
AFTER=${2:-ls -l /tmp/relay}
PART_MIB=${RELAY_PART_MIB:-48}
CARRY_LIMIT_MIB=64
NAME=$(basename "$FILE")
SHA=$(sha256sum "$FILE" | cut -d' ' -f1)

exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.relay/' "$exclude" 2>/dev/null || echo '/.relay/' >> "$exclude"
rm -rf .relay && mkdir -p .relay
split -b "${PART_MIB}m" -a 1 "$FILE" .relay/part.
parts=()
for p in .relay/part.*; do
  dir=.relay/$(basename "$p" | cut -d. -f2)
  mkdir -p "$dir" && mv "$p" "$dir/" && parts+=("$dir/$(basename "$p")")
done

tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
biggest=$(du -b "${parts[0]}" | cut -f1)
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "$NAME: sha256 $SHA, ${#parts[@]} part(s) of at most ${PART_MIB} MiB; working tree $(mib "$tree")"
if [ $((tree + biggest)) -ge $((CARRY_LIMIT_MIB * 1048576)) ]; then
  echo "gpu-relay: a part plus the working tree is $(mib $((tree + biggest))), over the ${CARRY_LIMIT_MIB} MiB" \
    "a call carries: use a smaller RELAY_PART_MIB" >&2
  exit 1
fi
echo "Issue these device calls back to back (run tool: carry, command):"
last=$((${#parts[@]} - 1))
for i in "${!parts[@]}"; do
  part=${parts[$i]}
  if [ "$i" -lt "$last" ]; then
    command="mkdir -p /tmp/relay && cp $part /tmp/relay/"
  else
    joined=""
    for j in $(seq 0 $((last - 1))); do joined="$joined /tmp/relay/$(basename "${parts[$j]}")"; done
    command="cat$joined $part > /tmp/relay/$NAME && echo '$SHA  /tmp/relay/$NAME' | sha256sum -c - || exit 3;"
    [ -n "$joined" ] && command="$command rm -f$joined;"
    command="$command $AFTER"
  fi
  printf '  call %d: carry ["%s"]\n          command: %s\n' $((i + 1)) "$(dirname "$part")" "$command"
done
