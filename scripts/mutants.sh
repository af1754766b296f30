#!/usr/bin/env bash
# Mutations the test suite must kill (issues 9, 17, 19 and 21). A test name `lib`
# runs the crate's unit tests (cargo test --lib), `lib:PATH` only those whose path
# contains PATH. Each mutation is applied to a copy
# of the working tree in a temporary directory (the real tree is never edited),
# the tests that guard that property run, and a table mutation -> killed /
# survived / not applicable is printed. Exits non-zero if any mutation survives
# (or fails to apply: the script and the code went apart).
#
#   scripts/mutants.sh             # every mutation
#   scripts/mutants.sh gap-rule    # only mutations whose name contains "gap-rule"
#   scripts/mutants.sh --check     # apply each mutation to the copy and check it
#                                  # changes the source, without building or testing
#                                  # (seconds; tests/mutation_list.rs runs it in CI)
#
# MUTANTS_DIR (default /tmp/sluice-mutants-N, N a checksum of this checkout's
# path, so two worktrees never share one) holds the copy and its own cargo
# target dir (the first run builds the dependencies once; later runs rebuild only
# sluice). A second run on the same MUTANTS_DIR is refused while the first runs.
#
# `read-crc` (and `ring-skips-verify`) are keyed on a marker comment in src/:
# the line `// MUTANT: read-crc` names the line after it, which the mutation
# deletes; `// MUTANT: read-crc s|A|B|` instead replaces A by B on the line
# after it. Without the marker it reports "not applicable".
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${MUTANTS_DIR:-/tmp/sluice-mutants-$(printf %s "$root" | cksum | cut -d' ' -f1)}
tree=$work/tree
export CARGO_TARGET_DIR=$work/target
check=0
if [ "${1:-}" = --check ]; then
  check=1
  shift
fi
only=${1:-}

mkdir -p "$work"
exec 9>"$work/lock"
if ! flock -n 9; then
  echo "mutants.sh: $work is in use by another run (give this one its own MUTANTS_DIR)" >&2
  exit 2
fi
rm -rf "$tree"
mkdir -p "$tree"
(cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$tree" 2>/dev/null)
pristine=$work/pristine
rm -rf "$pristine"
cp -r "$tree/src" "$pristine"

# replace FILE OLD NEW: exactly one occurrence of OLD (a literal) becomes NEW.
replace() {
  python3 - "$tree/$1" "$2" "$3" <<'EOF'
import sys
path, old, new = sys.argv[1], sys.argv[2], sys.argv[3]
s = open(path).read()
n = s.count(old)
if n != 1:
    sys.exit(f"{path}: expected the text once, found it {n} times:\n{old}")
open(path, "w").write(s.replace(old, new))
EOF
}

# marker NAME: apply the `// MUTANT: NAME` marker's mutation; exit 2 if no marker.
marker() {
  python3 - "$tree/src" "$1" <<'EOF'
import os, re, sys
src, name = sys.argv[1], sys.argv[2]
tag = f"// MUTANT: {name}"
for d, _, files in os.walk(src):
    for f in files:
        if not f.endswith(".rs"):
            continue
        p = os.path.join(d, f)
        lines = open(p).read().split("\n")
        for i, l in enumerate(lines):
            at = l.find(tag)
            if at < 0 or i + 1 >= len(lines):
                continue
            rest = l[at + len(tag):].strip()
            if rest.startswith("s|"):
                parts = rest.split("|")
                # s|A|B| and nothing else: A and B may not hold a '|'
                if len(parts) != 4 or parts[3] != "" or not parts[1] or parts[1] == parts[2]:
                    sys.exit(f"{p}:{i+1}: marker is not s|A|B| (A, B without '|', A != B)")
                if lines[i + 1].count(parts[1]) != 1:
                    sys.exit(f"{p}:{i+2}: marker substitution does not apply")
                lines[i + 1] = lines[i + 1].replace(parts[1], parts[2], 1)
            else:
                del lines[i + 1]
            open(p, "w").write("\n".join(lines))
            print(f"{p}:{i+2}")
            sys.exit(0)
sys.exit(2)
EOF
}

declare -a results=()
fail=0

# run NAME TESTS... : apply_NAME mutates the copy; the tests must fail.
run() {
  local name=$1
  shift
  if [ -n "$only" ] && [[ "$name" != *"$only"* ]]; then
    return
  fi
  rm -rf "$tree/src"
  cp -r "$pristine" "$tree/src"
  local out
  out=$("apply_${name//-/_}" 2>&1)
  local rc=$?
  if [ $rc -eq 2 ]; then
    results+=("$name|not applicable (no marker)|")
    [ "$check" = 1 ] && fail=1 # --check: a marker that went away is an error
    return
  elif [ $rc -ne 0 ]; then
    results+=("$name|MUTATION DID NOT APPLY|$out")
    fail=1
    return
  fi
  if [ "$check" = 1 ]; then
    if diff -rq "$pristine" "$tree/src" >/dev/null; then
      results+=("$name|CHANGES NOTHING|$out")
      fail=1
    else
      results+=("$name|applies|$*")
    fi
    return
  fi
  # every run with the features scripts/test builds (librados among them,
  # which install-deps installs): one dependency build serves them all, and
  # a target directory copied from the suite's is reused as it is
  local args=(--features rados)
  local filter=()
  for t in "$@"; do
    if [ "$t" = lib ]; then
      args+=(--lib)  # the library's unit tests
    elif [[ "$t" == lib:* ]]; then
      # the library's unit tests whose path contains FILTER only (a mutation
      # that hangs other modules' tests, whose own tests fail on a watchdog)
      args+=(--lib)
      filter=("${t#lib:}")
    else
      args+=(--test "$t")
    fi
  done
  echo "== $name: cargo test --release ${args[*]}" >&2
  local log=$work/$name.log
  if (cd "$tree" && cargo test --release "${args[@]}" "${filter[@]}" >"$log" 2>&1); then
    results+=("$name|SURVIVED|$*")
    fail=1
  elif grep -qE "^error(\[E[0-9]+\])?:" "$log" && ! grep -q "test result" "$log" \
    && ! grep -q "process didn't exit successfully" "$log"; then
    results+=("$name|DOES NOT COMPILE (see $log)|$*")
    fail=1
  else
    # a test binary that crashed (a signal) ran and failed: killed too
    local first
    first=$(grep -oE "^test [a-z0-9_:]+ \.\.\. FAILED" "$log" | head -1 | sed 's/^test //; s/ \.\.\. FAILED//')
    [ -z "$first" ] && first=$(grep -oE "\(signal: [^)]*\)" "$log" | head -1 | sed 's/^/crashed /')
    results+=("$name|killed|$first")
  fi
}

apply_write_many_order() {
  marker write-many-order
}
apply_block_crc_wrong_polynomial() {
  marker block-crc-wrong-polynomial
}
apply_replay_skips_crc() {
  marker replay-skips-crc
}
apply_gap_rule_removed() {
  replace src/recovery.rs 'if f.seq > expected && f.seq > w {' 'if f.seq > expected {'
}
apply_watermark_ignored() {
  replace src/recovery.rs 'if f.seq > expected && f.seq > w {' 'if f.seq > expected && f.seq > u64::MAX - 1 {'
}
apply_nbd_drops_fua() {
  replace src/nbd/requests.rs 'proto::CMD_WRITE => self.vol.write(off, &payload, fua),' 'proto::CMD_WRITE => self.vol.write(off, &payload, false),'
}
apply_file_flush_noop() {
  replace src/media/file.rs '        self.file.sync_data()' '        Ok(())'
}
apply_recovery_wipes_first() {
  python3 - "$tree/src/volume/mod.rs" <<'EOF'
import sys
p = sys.argv[1]
s = open(p).read()
a = """        if needs_checkpoint {
            self.checkpoint_now(false)?;
        } else {
            self.commit
                .update_superblock(|sb| sb.flags &= !FLAG_CLEAN)?;
        }
"""
b = """        if !wipe.is_empty() {
            self.commit.wipe(wipe)?;
            self.core.lock().segs.wiped(wipe);
        }
"""
# the wipes move in front of the checkpoint (whatever stands between them,
# such as the superblock repair, stays where it is)
if s.count(a) != 1 or s.count(b) != 1 or s.index(a) > s.index(b):
    sys.exit("finish_mount does not have the checkpoint-then-wipe shape")
s = s.replace(b, "", 1)
open(p, "w").write(s.replace(a, b + a, 1))
EOF
}
apply_read_crc() {
  marker read-crc
}
apply_ring_skips_verify() {
  marker ring-skips-verify
}
apply_ring_spare_unfilled() {
  # a never-written or zeroed block leaves a reused ring buffer's old bytes
  marker ring-spare-unfilled
}
apply_aio_refused_read_succeeds() {
  # a read io_submit refused completes as a whole block read, not its errno
  marker aio-refused-read-succeeds
}
apply_ring_fragments_not_unpacked() {
  # a ring read of fragments answers without unpacking (or checking) them
  marker ring-fragments-not-unpacked
}
apply_scrub_skips_fragments() {
  # scrub passes over LZ4 fragments (their packed blocks never checked)
  marker scrub-skips-fragments
}
apply_ring_holds_no_reuse_share() {
  # a read-ring read gives its reuse share back at once, not after its CRC check
  replace src/volume/read.rs '        std::mem::forget(share);' '        drop(share);'
  replace src/volume/read.rs '        // SAFETY: this read'"'"'s share, taken in `start`, released once.
        unsafe { sh.reuse.force_unlock_read() };' ''
  replace src/volume/read.rs '            // SAFETY: the share forgotten above, released once.
            unsafe { sh.reuse.force_unlock_read() };' ''
  replace src/volume/read.rs '                        unsafe { self.vol.sh.reuse.force_unlock_read() };' ''
}
apply_durable_damage_dropped() {
  replace src/recovery.rs '(BadKind::Data { seq }, _) => (c_next..w).contains(seq),' '(BadKind::Data { seq: _ }, _) => false,'
}
apply_unseen_chunks_renumbered() {
  replace src/recovery/mount.rs '    c.next_seq += jump;' '    c.next_seq += 0 * jump;'
}

apply_volume_lock_skipped() {
  replace src/media/file.rs '        if lock != Lock::None {' '        if lock == Lock::None {'
}
apply_create_skips_probe() {
  replace src/cli/create.rs '                refuse_if_holds_data(&a.path)?;' '                let _ = refuse_if_holds_data;'
}
apply_create_without_excl() {
  replace src/media/file.rs '            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)?;
        let m = f.metadata()?;' '            .create(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)?;
        let m = f.metadata()?;'
}
apply_pid_file_not_exclusive() {
  replace src/media/outfile.rs 'match std::fs::hard_link(&tmp, path) {' 'match std::fs::rename(&tmp, path) {'
}
apply_record_clobbers() {
  replace src/cli/serve.rs '            let r = record_file(p, &specs)' '            let r = std::fs::File::create(p)'
}
apply_say_panics_on_epipe() {
  replace src/cli/say.rs '    write(libc::LOG_NOTICE, format!("{args}\n").as_bytes());' '    eprintln!("{args}");'
}
apply_metrics_blocks_per_connection() {
  replace src/metrics/http.rs '                        if s.set_nonblocking(true).is_err() {' '                        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                        if s.set_nonblocking(false).is_err() {'
}
apply_checkpoint_slot_error_ignored() {
  replace src/volume/commit.rs 'return Err(self.fail(format_args!("writing checkpoint slot {slot}"), &e));' 'return Err(Error::Failed(Failure::io(format_args!("writing checkpoint slot {slot}"), &e)));'
}
apply_failed_volume_refuses_reads() {
  replace src/volume/mod.rs '        if !write {
            return Ok(());
        }
        if self.sh.opts.read_only {' '        if !write {
            return self.sh.check_failed();
        }
        if self.sh.opts.read_only {'
}
apply_discard_tombstone() {
  marker discard-tombstone
}
apply_stale_inflight_kept() {
  marker stale-inflight-kept
}
apply_host_crc_of_wrong_block() {
  marker host-crc-of-wrong-block
}
apply_idle_discard_skipped() {
  replace src/volume/housekeeper.rs '        if idle_ahead && idle_ms >= 1000 && self.commit.discard_enabled() {' '        if false && idle_ahead && idle_ms >= 1000 && self.commit.discard_enabled() {'
}
apply_ring_replay_skipped() {
  marker ring-replay-skipped
}
apply_record_crc_unchecked() {
  marker record-crc-unchecked
}
apply_flush_before_record() {
  marker flush-before-record
}
apply_placed_crc_unchecked() {
  marker placed-crc-unchecked
}
apply_record_without_data() {
  marker record-without-data
}
apply_rehome_copies_nothing() {
  marker rehome-copies-nothing
}
apply_placed_segment_not_held() {
  marker placed-segment-not-held
}
apply_mount_never_cleans() {
  marker mount-never-cleans
}
apply_gc_picks_held_segment() {
  marker gc-picks-held-segment
}
apply_superblock_twin_same_flush() {
  marker superblock-twin-same-flush
}
apply_heal_skips_crc() {
  marker heal-skips-crc
}
apply_raid6_wrong_coefficient() {
  marker raid6-wrong-coefficient
}
apply_heal_guesses_parity() {
  marker heal-guesses-parity
}
apply_parity_not_rotated() {
  marker parity-not-rotated
}
apply_member_wrong_slot_accepted() {
  marker member-wrong-slot-accepted
}
# stripe sets (issue 20, src/stripe_set/)
apply_partial_row_parity_skipped() {
  marker partial-row-parity-skipped
}
apply_full_row_parity_skipped() {
  marker full-row-parity-skipped
}
apply_scratch_before_data_durable() {
  marker scratch-before-data-durable
}
apply_uncovered_block_from_stale_parity() {
  marker uncovered-block-from-stale-parity
}
apply_completed_row_tags_kept() {
  marker completed-row-tags-kept
}
# a closed segment's last row finished and its lane retired (finding 8)
apply_close_hook_skipped() {
  marker close-hook-skipped
}
apply_closed_rows_unfinished_at_flush() {
  marker closed-rows-unfinished-at-flush
}
apply_tag_voids_unordered() {
  marker tag-voids-unordered
}
apply_scratch_voids_in_hash_order() {
  marker scratch-voids-in-hash-order
}
apply_block_zero_heal_needs_new_seq() {
  marker block-zero-heal-needs-new-seq
}
apply_resync_skips_header_heal() {
  marker resync-skips-header-heal
}
apply_mixed_check_linear() {
  marker mixed-check-linear
}
apply_set_without_mixed_check() {
  marker set-without-mixed-check
}
apply_stale_by_newest_generation() {
  marker stale-by-newest-generation
}
apply_member_failure_unrecorded() {
  marker member-failure-unrecorded
}
apply_degraded_read_uses_failed_member() {
  marker degraded-read-uses-failed-member
}
apply_dead_tags_voided_before_tombstone() {
  marker dead-tags-voided-before-tombstone
}
apply_recovery_heal_skipped() {
  marker recovery-heal-skipped
}
apply_runtime_header_heal_skipped() {
  marker runtime-header-heal-skipped
}
apply_resync_before_recovery_heal() {
  marker resync-before-recovery-heal
}
apply_rebuild_scratch_copies_skipped() {
  marker rebuild-scratch-copies-skipped
}
apply_stale_mount_tags_kept() {
  marker stale-mount-tags-kept
}
# a degraded mount's lanes of tags found at mount, back when their
# segment's life ends, and only those (h14-stripes)
apply_retire_mount_lanes_skipped() {
  marker retire-mount-lanes-skipped
}
apply_retire_mount_lanes_any_row() {
  marker retire-mount-lanes-any-row
}
# member flushes at once, each failure taken (h14-stripes)
apply_member_flushes_serial() {
  marker member-flushes-serial
}
apply_tomb_parity_in_place() {
  marker tomb-parity-in-place
}
apply_parallel_flush_error_dropped() {
  marker parallel-flush-error-dropped
}
# recovery's checked reads of mirrored metadata; an evicted row's marks
# (h15-rows)
apply_meta_read_unchecked() {
  marker meta-read-unchecked
}
# scrub of the mirrored checkpoint copies (lead, stop 37)
apply_meta_scrub_skipped() {
  marker meta-scrub-skipped
}
apply_meta_scrub_stops_at_first_good() {
  marker meta-scrub-stops-at-first-good
}
apply_evicted_row_loaded_full() {
  marker evicted-row-loaded-full
}
# fused parity kernels and the reused parity buffers (h14-stripes)
apply_fused_mul2_wrong_reduction() {
  marker fused-mul2-wrong-reduction
}
apply_scratch_copy_column_stale() {
  marker scratch-copy-column-stale
}
apply_superblock_copies_not_repaired() {
  marker superblock-copies-not-repaired
}
apply_replayed_rows_not_resynced() {
  marker replayed-rows-not-resynced
}
apply_resync_bakes_failing_block() {
  marker resync-bakes-failing-block
}
apply_stripe_rebuild_skips_crc() {
  # the read path's CRC check, which a rebuilt piece passes like any read
  marker read-crc
}
apply_heal_ignores_crc() {
  marker heal-ignores-crc
}
apply_heal_rewrite_skipped() {
  marker heal-rewrite-skipped
}
apply_rebuild_marks_before_data() {
  marker rebuild-marks-before-data
}
apply_rebuilding_member_read_early() {
  marker rebuilding-member-read-early
}
apply_scratch_read_place_misnamed() {
  marker scratch-read-place-misnamed
}
apply_parity_scrub_blind() {
  marker parity-scrub-blind
}
apply_parity_scrub_repair_skipped() {
  marker parity-scrub-repair-skipped
}
apply_rebuild_record_one_place() {
  marker rebuild-record-one-place
}
apply_rebuild_data_unflushed() {
  marker rebuild-data-unflushed
}
apply_rebuild_bulk_piece_misplaced() {
  marker rebuild-bulk-piece-misplaced
}
apply_rebuild_pipe_piece_early() {
  # a pipelined rebuild rebuilds a piece before every member's part of it
  # is read (issue 20 item 5)
  marker rebuild-pipe-piece-early
}
apply_rebuilding_mount_not_resynced() {
  # a mount with the member being rebuilt the only one down skips the
  # resync again (docs/stripes.md §0 finding 7)
  marker rebuilding-mount-not-resynced
}
apply_rebuild_unfenced() {
  # a rebuild batch without the fence: writes going on land between its
  # reads and its write of the new member's piece (issue 20 item 5)
  marker rebuild-unfenced
}
apply_stale_member_accepted() {
  marker stale-member-accepted
}
apply_ring_freed_early() {
  # free every record at the next persisted start, and take out the
  # assertion that would stop it: the simulator's oracle must see the loss
  marker ring-freed-early
  replace src/volume/intent.rs '                r.lsn_end <= durable_lsn,' '                true,'
}
apply_discard_unwiped() {
  replace src/segments.rs '            discarded: vec![true; segs.len()],' '            discarded: vec![false; segs.len()],'
}
apply_store_wipe_skipped() {
  marker store-wipe-skipped
}
apply_store_bounds_unchecked() {
  replace src/store.rs 'if !(len as u64).is_multiple_of(BS) || p.checked_add(n).is_none_or(|e| e > self.blocks()) {' 'if !(len as u64).is_multiple_of(BS) {'
}
apply_codec_virtual_takes_data() {
  replace src/format/codec.rs '        next_data += entry.data_blocks();' '        next_data += entry.count;'
}
apply_metadata_not_allocated() {
  replace src/volume/mod.rs '        media.allocate(&metadata_ranges(&geo))?;' ''
  replace src/volume/mod.rs '            if let Err(e) = media.allocate(&metadata_ranges(&geo)) {' '            if let Err(e) = Ok::<(), std::io::Error>(()) {'
}
apply_logdev_flush_noop() {
  marker logdev-flush-noop
}
apply_mirror_acked_after_one_flush() {
  marker mirror-acked-after-one-flush
}
apply_logdev_foreign_accepted() {
  marker logdev-foreign-accepted
}
apply_log_loss_stops_volume() {
  marker log-loss-stops-volume
}
apply_missing_ok_keeps_old_chain() {
  marker missing-ok-keeps-old-chain
}
apply_stale_mirror_unmarked() {
  marker stale-mirror-unmarked
}
apply_stale_mirror_replayed() {
  marker stale-mirror-replayed
}
apply_mirror_first_chain_kept() {
  marker mirror-first-chain-kept
}
apply_placed_record_without_places_ends_quietly() {
  marker placed-record-without-places-ends-quietly
}
apply_replace_loses_unclean_log() {
  marker replace-loses-unclean-log
}
apply_ring_error_acked() {
  marker ring-error-acked
}
apply_batch_error_acked() {
  marker batch-error-acked
}
apply_seal_skips_claim_wait() {
  marker seal-skips-claim-wait
}
apply_stream_run_ignores_holes() {
  marker stream-run-ignores-holes
}
apply_streaming_off() {
  marker streaming-off
}
apply_record_rewrites_placed() {
  marker record-rewrites-placed
}
apply_streamed_write_dropped() {
  marker streamed-write-dropped
}
apply_streamed_record_names_others() {
  marker streamed-record-names-others
}
apply_streamed_record_with_company() {
  marker streamed-record-with-company
}
apply_stream_claims_untaken() {
  marker stream-claims-untaken
}
apply_streamed_record_before_company() {
  marker streamed-record-before-company
}
apply_streamed_record_error_stops() {
  marker streamed-record-error-stops
}
apply_streamed_block_copied() {
  marker streamed-block-copied
}
apply_streamed_read_from_image() {
  marker streamed-read-from-image
}
apply_record_copies_streamed() {
  marker record-copies-streamed
}
apply_streamed_read_unverified() {
  marker streamed-read-unverified
}
apply_metered_batch_unforwarded() {
  marker metered-batch-unforwarded
}
apply_beside_error_dropped() {
  marker beside-error-dropped
}
apply_beside_for_every_caller() {
  marker beside-for-every-caller
}
apply_nbd_payload_unaligned() {
  marker nbd-payload-unaligned
}
apply_add_mirror_unmarked() {
  marker add-mirror-unmarked
}
apply_remove_before_records_homed() {
  marker remove-before-records-homed
}
apply_peek_identity_exact() {
  marker peek-identity-exact
}
apply_gc_lsn_watermark() {
  marker gc-lsn-watermark
}
apply_gc_lsn_ignored() {
  marker gc-lsn-ignored
}
apply_chain_unchecked() {
  marker chain-unchecked
}
apply_chain_not_written() {
  marker chain-not-written
}
apply_ring_removed_before_homed() {
  marker ring-removed-before-homed
}
apply_info_fallback_hidden() {
  marker info-fallback-hidden
}
apply_flush_covers_announced() {
  marker flush-covers-announced
}
apply_company_wait_alone() {
  marker company-wait-alone
}
apply_parked_answered_before_record() {
  marker parked-answered-before-record
}
apply_flush_parks_only_on_entry() {
  marker flush-parks-only-on-entry
}
apply_fill_never_joins() {
  marker fill-never-joins
}
apply_fill_follower_not_waiting() {
  marker fill-follower-not-waiting
}
apply_fill_failed_group_acked() {
  marker fill-failed-group-acked
}
apply_fill_parked_answered_at_once() {
  marker fill-parked-answered-at-once
}
apply_chain_room_unchecked() {
  marker chain-room-unchecked
}
apply_chain_after_slot_fallback() {
  marker chain-after-slot-fallback
}
apply_quick_test_threshold() {
  marker quick-test-threshold
}
apply_write_batch_takes_fua() {
  marker write-batch-takes-fua
}
apply_nbd_flush_skipped() {
  marker nbd-flush-skipped
}
apply_chain_below_checkpoint() {
  marker chain-below-checkpoint
}
apply_flush_latency_unobserved() {
  marker flush-latency-unobserved
}
apply_put_new_overwrites() {
  marker put-new-overwrites
}
apply_put_new_any_existing_is_ours() {
  marker put-new-any-existing-is-ours
}
apply_list_first_page_only() {
  marker list-first-page-only
}
apply_cache_trust_unverified() {
  marker cache-trust-unverified
}
apply_cache_read_error_fatal() {
  marker cache-read-error-fatal
}
apply_cache_check_unlocked() {
  marker cache-check-unlocked
}
apply_cache_check_stale_life() {
  marker cache-check-stale-life
}
apply_aws_profile_missing_ignored() {
  marker aws-profile-missing-ignored
}
apply_aws_files_over_env() {
  marker aws-files-over-env
}
apply_range_length_unchecked() {
  marker range-length-unchecked
}
apply_lease_exists_wins() {
  marker lease-exists-wins
}
apply_lease_ignores_holder() {
  marker lease-ignores-holder
}
apply_damaged_head_never_falls_back() {
  marker damaged-head-never-falls-back
}
apply_rados_create_not_exclusive() {
  marker rados-create-not-exclusive
}
apply_rados_short_read_unchecked() {
  marker rados-short-read-unchecked
}
apply_objname_accepts_epoch_zero() {
  marker objname-accepts-epoch-zero
}
apply_staging_freed_early() {
  marker staging-freed-early
}
apply_object_deleted_before_table() {
  marker object-deleted-before-table
}
apply_evicted_header_kept() {
  marker evicted-header-kept
}
apply_object_deleted_before_ckpt_object() {
  marker object-deleted-before-ckpt-object
}
apply_roll_forward_past_gap() {
  marker roll-forward-past-gap
}
apply_flush_acked_before_log_put() {
  marker flush-acked-before-log-put
}
apply_log_replay_skipped() {
  marker log-replay-skipped
}
apply_log_deleted_before_ckpt() {
  marker log-deleted-before-ckpt
}
apply_ckpt_put_before_its_uploads() {
  marker ckpt-put-before-its-uploads
}
apply_pending_ckpt_names_another_life() {
  marker pending-ckpt-names-another-life
}
apply_waited_life_not_rescued() {
  marker waited-life-not-rescued
}
apply_queued_segments_carried() {
  marker queued-segments-carried
}
apply_fence_skipped() {
  marker fence-skipped
}
apply_fenced_put_taken_as_ok() {
  marker fenced-put-taken-as-ok
}
# several log PUTs in flight (docs/objects.md §5.0.2): a FLUSH answered
# once its own object is stored though a lower one is not; a taker's fence
# past the newest object, not in a gap below it; one media flush at a time
apply_log_acked_past_gap() {
  marker log-acked-past-gap
}
# issue 21 (branch h15-rados): a FLUSH group's log put in pieces at once;
# the record that opens a new piece is left out of every piece, so a FLUSH
# acknowledged on the whole group loses that write (and the next group no
# longer follows the chain)
apply_log_piece_record_dropped() {
  marker log-piece-record-dropped
}
# a v2 log object's record replayed without its CRC checked: a stored line
# damaged under a matching object CRC reaches the rebuilt file (issue 21 wave 16)
apply_objlog_record_crc_unchecked() {
  marker objlog-record-crc-unchecked
}
apply_fence_ignores_gaps() {
  marker fence-ignores-gaps
}
apply_flush_parallelism_ignored() {
  marker flush-parallelism-ignored
}
# issue 21 wave 11 (§5.6 interleaving 6): the taker does not check its
# fence against the old writer's objects above it; a fence before the
# chain's first object ends the replay; a FLUSH answered on a stale lease
apply_fence_recheck_skipped() {
  marker fence-recheck-skipped
}
apply_fence_at_chain_start_ends_replay() {
  marker fence-at-chain-start-ends-replay
}
apply_flush_answered_on_a_stale_lease() {
  marker flush-answered-on-a-stale-lease
}
# a store that does not answer: staging grows without its bound
apply_staging_unbounded() {
  marker staging-unbounded
}
apply_flush_gate_skipped() {
  marker flush-gate-skipped
}
apply_lease_check_always_ok() {
  marker lease-check-always-ok
}
apply_mutation_without_lease_check() {
  marker mutation-without-lease-check
}
# a live superseded writer neither fenced by the taker nor checking its
# lease: the SeaweedFS test of two live processes must see A answer FLUSHes
# the taker never gets
apply_ring_default_off() {
  marker ring-default-off
}
apply_cache_bound_ignored() {
  marker cache-bound-ignored
}
apply_superseded_writer_unfenced() {
  marker fence-skipped && marker lease-check-always-ok
}
apply_map_five_byte_stride() {
  marker map-five-byte-stride
}
apply_fragment_place_off_by_one() {
  marker fragment-place-off-by-one
}
apply_packed_chain_unchecked() {
  marker packed-chain-unchecked
}
apply_objckpt_reserved_unchecked() {
  marker objckpt-reserved-unchecked
}
apply_fragment_raw_crc_unchecked() {
  marker fragment-raw-crc-unchecked
}
apply_lz4_short_output_accepted() {
  marker lz4-short-output-accepted
}
apply_gc_moves_dead_fragment() {
  marker gc-moves-dead-fragment
}
apply_gc_drops_live_fragment() {
  replace src/volume/core.rs "if self.map.get(lba) == at {" "if self.map.get(lba) == at && false {"
}
apply_gc_read_skips_crc() {
  marker gc-read-skips-crc
}
apply_gc_read_misses_live() {
  marker gc-read-misses-live
}
apply_gc_moves_unverified() {
  marker gc-moves-unverified
}
# `sluice bench durable` (issue 21, docs/objects.md §4.13): a write counted
# without its FLUSH (the workload's IOPS would not be durable writes)
apply_durable_write_not_flushed() {
  marker durable-write-not-flushed
}
# the sluice-objects: bench target: a prefix holding another volume is
# created over without --force; a volume holding live data is benched over
apply_bench_objects_create_forced() {
  marker bench-objects-create-forced
}
apply_bench_objects_live_unchecked() {
  marker bench-objects-live-unchecked
}
apply_place_unconditional() {
  marker place-unconditional
}
apply_crc_load_off_by_one() {
  marker crc-load-off-by-one
}
apply_prune_past_unwritten_chunk() {
  marker prune-past-unwritten-chunk
}
apply_pace_prepaid_free() {
  # blocks a pacing sleep lets by on credit take no slot: the rate is exceeded
  marker pace-prepaid-free
}
apply_gc_rate_wall_clock() {
  # the pacer's GC rate over wall time again (idle between rounds counted):
  # a GC that keeps up measures the writers' own paced rate
  marker gc-rate-wall-clock
}
apply_barrier_every_victim() {
  # a reuse barrier whenever a segment is pending (main's rule was close:
  # at 4 pending and after every clean-ahead): the batch test counts them
  marker barrier-every-victim
}
apply_gc_class_no_fallback() {
  marker gc-class-no-fallback
}
apply_tails_in_series() {
  # barriers and checkpoints run in series with GC again (issue 22's
  # overlap undone): the overlap test counts no tail beside a victim
  marker tails-in-series
}
apply_ckpt_pad_stale() {
  # the kept checkpoint image buffer's bytes past the body are not cleared:
  # an earlier image's (or garbage) reach the slot
  marker ckpt-pad-stale
}
apply_staged_plan_ignores_close() {
  marker staged-plan-ignores-close
}
apply_gc_fragments_in_record_order() {
  marker gc-fragments-in-record-order
}
apply_tune_off_ignored() {
  marker tune-off-ignored
}
apply_direct_never_set() {
  marker direct-never-set
}
apply_direct_never_samples() {
  marker direct-never-samples
}
apply_direct_run_not_reset() {
  marker direct-run-not-reset
}
apply_wake_without_chain() {
  marker wake-without-chain
}
apply_baton_kept() {
  marker baton-kept
}
apply_hk_shares_request_condvar() {
  marker hk-shares-request-condvar
}
apply_huge_carve_overlap() {
  marker huge-carve-overlap
}
apply_carved_buffer_freed_alone() {
  marker carved-buffer-freed-alone
}

read_tests=(corruption engine)
for f in "$tree"/tests/*.rs; do
  b=$(basename "$f" .rs)
  case "$b" in *verif* | *rot* | *scrub*) read_tests+=("$b") ;; esac
done

run replay-skips-crc corruption header_flips
run gap-rule-removed recovery_rules
run watermark-ignored recovery_rules header_flips
run nbd-drops-fua volatile_cache nbd_durable_replies
run file-flush-noop volatile_cache
run recovery-wipes-first mount_power_cut
run read-crc "${read_tests[@]}"
run ring-skips-verify nbd_verified_reads
run ring-spare-unfilled verified_reads
run aio-refused-read-succeeds lib
run ring-fragments-not-unpacked compression
run scrub-skips-fragments compression
run ring-holds-no-reuse-share verified_reads
run durable-damage-dropped dst header_flips
run unseen-chunks-renumbered recovery_rules
run volume-lock-skipped no_clobber
run create-skips-probe no_clobber
run create-without-excl no_clobber
run pid-file-not-exclusive no_clobber
run record-clobbers no_clobber
run say-panics-on-epipe nbd_service
run metrics-blocks-per-connection observe
run checkpoint-slot-error-ignored engine
run failed-volume-refuses-reads engine host_full
run metadata-not-allocated host_full
run discard-tombstone dst
run stale-inflight-kept model
run host-crc-of-wrong-block engine
run block-crc-wrong-polynomial lib
run write-many-order engine
run idle-discard-skipped host_full
run discard-unwiped superblock_ends
run ring-replay-skipped intent_log dst objects_crash
run record-crc-unchecked dst
run flush-before-record dst
run ring-freed-early intent_log dst
run placed-crc-unchecked intent_log
run record-without-data intent_log
run rehome-copies-nothing intent_log
run placed-segment-not-held intent_log
run mount-never-cleans compress_stress
run gc-picks-held-segment lib
run heal-skips-crc parity
run raid6-wrong-coefficient parity
run heal-guesses-parity parity
run parity-not-rotated stripe
run member-wrong-slot-accepted lib
run partial-row-parity-skipped lib stripe_set
run full-row-parity-skipped lib
run scratch-before-data-durable lib dst
run uncovered-block-from-stale-parity lib
run completed-row-tags-kept lib dst
run close-hook-skipped stripe_set
run closed-rows-unfinished-at-flush lib
run tag-voids-unordered lib stripe_rebuild_online
run scratch-voids-in-hash-order dst
run block-zero-heal-needs-new-seq stripe_set
run resync-skips-header-heal stripe_set
run mixed-check-linear lib dst
run set-without-mixed-check stripe_set dst
run member-failure-unrecorded stripe_set dst
run stale-by-newest-generation stripe stripe_set
run degraded-read-uses-failed-member lib
run dead-tags-voided-before-tombstone lib dst
run recovery-heal-skipped stripe_set dst
run runtime-header-heal-skipped stripe_set
run resync-before-recovery-heal stripe_set dst
run rebuild-scratch-copies-skipped stripe_repair
run stale-mount-tags-kept dst
run retire-mount-lanes-skipped lib
run retire-mount-lanes-any-row lib
run member-flushes-serial lib
run tomb-parity-in-place lib
run parallel-flush-error-dropped lib
run fused-mul2-wrong-reduction lib parity
run scratch-copy-column-stale lib stripe_set
run superblock-copies-not-repaired stripe_set dst
run meta-read-unchecked stripe_set dst
run meta-scrub-skipped stripe_set
run meta-scrub-stops-at-first-good stripe_set
run evicted-row-loaded-full lib
run replayed-rows-not-resynced dst
run resync-bakes-failing-block dst
run stripe-rebuild-skips-crc stripe_set
run stale-member-accepted stripe
run heal-ignores-crc stripe_repair
run heal-rewrite-skipped stripe_repair
run rebuild-marks-before-data stripe_repair
run rebuild-data-unflushed stripe_repair
run rebuild-bulk-piece-misplaced stripe_repair
run rebuild-pipe-piece-early stripe_repair
run rebuild-unfenced stripe_rebuild_online
run rebuilding-mount-not-resynced stripe_rebuild_online
run rebuild-record-one-place stripe_repair
run rebuilding-member-read-early stripe_repair
run scratch-read-place-misnamed lib:scratch_tags_are_found stripe_set
run parity-scrub-blind stripe_repair
run parity-scrub-repair-skipped stripe_repair
run logdev-flush-noop log_device dst
run mirror-acked-after-one-flush log_device dst
run logdev-foreign-accepted log_device
run log-loss-stops-volume log_device intent_log
run missing-ok-keeps-old-chain log_device
run stale-mirror-unmarked log_device dst
run stale-mirror-replayed log_device
run mirror-first-chain-kept log_device dst
run replace-loses-unclean-log log_device
run flush-latency-unobserved observe
run ring-error-acked intent_log
run batch-error-acked intent_log
run seal-skips-claim-wait streamed_writes
run stream-run-ignores-holes streamed_writes
run streaming-off streamed_writes
run record-rewrites-placed streamed_writes
run streamed-write-dropped streamed_writes
run streamed-record-names-others lib:intent
run streamed-record-with-company streamed_writes
run stream-claims-untaken streamed_writes
run streamed-record-before-company streamed_writes
run streamed-record-error-stops streamed_writes
run streamed-block-copied streamed_writes
run streamed-read-from-image streamed_writes
run record-copies-streamed streamed_writes
run streamed-read-unverified streamed_writes
run metered-batch-unforwarded lib
run beside-error-dropped lib
run beside-for-every-caller lib:media::file
run nbd-payload-unaligned observe
run add-mirror-unmarked log_device
run remove-before-records-homed log_device
run peek-identity-exact dst lib
run gc-lsn-watermark dst
run gc-lsn-ignored dst lib
run chain-unchecked recovery_rules
run chain-not-written recovery_rules
run ring-removed-before-homed log_device
run info-fallback-hidden intent_log
run chain-room-unchecked lib
run flush-covers-announced group_commit
run company-wait-alone group_commit
run parked-answered-before-record group_commit dst
run flush-parks-only-on-entry group_commit
run fill-never-joins group_commit
run fill-follower-not-waiting group_commit
run fill-failed-group-acked group_commit
run fill-parked-answered-at-once group_commit dst
run chain-after-slot-fallback lib
run chain-below-checkpoint lib
run write-batch-takes-fua volatile_cache nbd_durable_replies
run nbd-flush-skipped nbd_durable_replies
run quick-test-threshold lib
run put-new-overwrites objects_s3
run put-new-any-existing-is-ours objects_s3
run list-first-page-only objects_s3
run cache-trust-unverified lib:objseg::tests objects_crash
run cache-read-error-fatal lib:objseg::tests
run cache-check-unlocked lib:objseg::tests_check
run cache-check-stale-life lib:objseg::tests_check
run aws-profile-missing-ignored lib:media::objects::awsfiles
run aws-files-over-env lib:media::objects::awsfiles
run range-length-unchecked objects_s3
run lease-exists-wins objects_s3 lib
run lease-ignores-holder lib
run objname-accepts-epoch-zero lib
run staging-freed-early lib objects_crash
run object-deleted-before-table lib objects_crash
run evicted-header-kept objects_crash
run object-deleted-before-ckpt-object lib objects_crash
run roll-forward-past-gap lib
run flush-acked-before-log-put lib objects_crash
run log-replay-skipped lib
run log-deleted-before-ckpt lib
run ckpt-put-before-its-uploads lib
run pending-ckpt-names-another-life lib
run waited-life-not-rescued lib
run queued-segments-carried lib
run fence-skipped lib
run fenced-put-taken-as-ok lib
run flush-gate-skipped lib
run log-acked-past-gap lib
run fence-ignores-gaps lib
run fence-recheck-skipped lib
run fence-at-chain-start-ends-replay lib
run flush-answered-on-a-stale-lease lib
run staging-unbounded lib
run flush-parallelism-ignored lib
run log-piece-record-dropped lib objects_crash
run objlog-record-crc-unchecked lib:format::objlog objects_crash
run lease-check-always-ok lib
run mutation-without-lease-check lib
run superseded-writer-unfenced objects_volume
run ring-default-off objects_volume
run cache-bound-ignored lib:objseg::tests::gc_victims
run objckpt-reserved-unchecked format_fuzz_smoke
run rados-create-not-exclusive objects_rados
run damaged-head-never-falls-back superblock_ends
run superblock-twin-same-flush superblock_ends
run rados-short-read-unchecked objects_rados
run store-wipe-skipped dst
run store-bounds-unchecked segment_store
run codec-virtual-takes-data model
run map-five-byte-stride compression lib
run fragment-place-off-by-one lib
run packed-chain-unchecked lib
run crc-load-off-by-one verified_reads
run fragment-raw-crc-unchecked compression lib
run lz4-short-output-accepted lib
run gc-moves-dead-fragment compression
run gc-drops-live-fragment compression
run place-unconditional lib
run prune-past-unwritten-chunk lib
run staged-plan-ignores-close lib
run gc-class-no-fallback lib
run gc-fragments-in-record-order compression
run tune-off-ignored compression
run direct-never-set compression
run direct-never-samples compression
run direct-run-not-reset compression
run placed-record-without-places-ends-quietly intent_log
run pace-prepaid-free lib
run gc-rate-wall-clock lib:volume::housekeeper
run barrier-every-victim lib:volume::housekeeper::tests
run tails-in-series lib:volume::housekeeper::tests
run ckpt-pad-stale lib:volume::housekeeper::tests
run wake-without-chain lib:volume::commit::tests
run baton-kept lib:volume::commit::tests
run hk-shares-request-condvar lib:volume::commit::tests
run huge-carve-overlap lib
run carved-buffer-freed-alone lib
run gc-read-skips-crc lib:volume::gcread::tests
run gc-read-misses-live lib:volume::gcread::tests
run gc-moves-unverified lib:volume::gcread::tests
run durable-write-not-flushed bench
run bench-objects-create-forced bench_objects
run bench-objects-live-unchecked bench_objects

if [ "$check" = 1 ] && [ -z "$only" ]; then
  # the list itself: one apply_ per name (bash keeps the last of two), and
  # every marker in src/ reached by an apply_ (else it is never run)
  for f in $(grep -oE '^apply_[a-z0-9_]+\(\)' "$0" | sort | uniq -d); do
    results+=("$f|DEFINED TWICE (the first is never run)|")
    fail=1
  done
  for m in $(grep -rhoE '// MUTANT: [a-z0-9-]+' "$root/src" | awk '{print $3}' | sort -u); do
    if ! grep -qE "^  marker $m\$" "$0"; then
      results+=("$m|MARKER WITHOUT apply_|")
      fail=1
    fi
  done
fi
printf '\n%-22s | %-30s | %s\n' mutation result "first failing test (or tests run)"
printf '%s\n' "-----------------------+--------------------------------+-----------------------------------"
for r in "${results[@]}"; do
  IFS='|' read -r n res why <<<"$r"
  printf '%-22s | %-30s | %s\n' "$n" "$res" "$why"
done
exit $fail
