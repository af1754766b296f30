#!/usr/bin/env bash
# WA of GC policies on every workload of docs/gc.md ("GC policy comparison").
# Usage: scripts/wa-policies.sh greedy,sepbit-cb,decay-cb   (release build first)
# WA is deterministic; each line is "workload  policy  WA".
set -euo pipefail
P=${1:-greedy,sepbit-cb,decay-cb}
S=${SLUICE:-./target/release/sluice}
T=${TRACES:-/work/shared/traces}
sim() { # workload size segsize
  "$S" sim --workload "$1" --size "$2" --segment-size "$3" --sweep 10 --gc "$P" --warmup 1 --measure 1 \
    | awk -v w="$1/$2/$3" '/ WA /{for(i=2;i<=NF;i++) if($i=="WA" && $(i-1)!="data"){print w, $2, $(i+1); break}}'
}
sim zipf:0.99 512M 1M
sim hotcold:80/20 512M 1M
sim uniform 512M 1M
sim hotcold:80/20 1G 4M
for g in ${P//,/ }; do
  for op in 5 7 10 20; do
    printf 'cloudphysics/op%s %s ' "$op" "$g"
    "$S" replay --trace "$T/libcachesim/cloudPhysicsIO.csv.gz" --format cloudphysics --map dense --fill \
      --overprovision "$op" --segment-size 1M --gc "$g" | awk '/^WA/{print $2}'
  done
  printf 'cloudphysics/op10/passes4 %s ' "$g"
  "$S" replay --trace "$T/libcachesim/cloudPhysicsIO.csv.gz" --format cloudphysics --map dense --fill \
    --overprovision 10 --segment-size 1M --passes 4 --gc "$g" | awk '/^WA/{print $2}'
  for op in 5 10; do
    printf 'tpcc/op%s %s ' "$op" "$g"
    "$S" replay --trace "$T/mqsim/tpcc-small.trace" --format mqsim --map dense --fill \
      --overprovision "$op" --segment-size 256K --gc "$g" | awk '/^WA/{print $2}'
  done
done
