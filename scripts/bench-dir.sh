# Sourced by the bench scripts that make, delete and truncate files in $DIR
# (bench-reads, bench-degraded, bench-rebuild, bench-stripe-write): `own_dir
# NAME` makes $DIR the run's own. A directory that holds anything else than
# an earlier run of the same script (its marker `.sluice-NAME`) is refused,
# so that DIR=/var/lib/images never loses an image to a cleanup glob; a
# second run on the same DIR is refused while the first runs.
own_dir() {
  local name=$1 marker="$DIR/.sluice-$1"
  mkdir -p "$DIR"
  if [ ! -e "$marker" ] && [ -n "$(ls -A "$DIR")" ]; then
    echo "$name: $DIR holds files this script did not make; give it an empty or new DIR" >&2
    exit 2
  fi
  : >>"$marker"
  exec 7>>"$marker"
  flock -n 7 || { echo "$name: $DIR is in use by another run (give this one its own DIR)" >&2; exit 2; }
}
