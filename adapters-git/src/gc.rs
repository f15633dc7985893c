//! `gc`: deletes stored objects that no kept snapshot, no recently returned snapshot and not the stat cache
//! reach (gix has no gc of its own).

use std::collections::HashSet;
use std::fs;
use std::time::{Duration, SystemTime};

use gix::ObjectId;
use rewind_core::model::GcReport;

use crate::error::{GitError, GitResult};
use crate::pack;
use crate::stat_cache::StatCache;
use crate::store::{Store, now_ms};
use crate::tree::reachable_from;

/// Collects unreachable objects of `store`: kept are those `keep` reaches, the stat cache's, and those of
/// every id returned since `grace` before `called_ms` (when gc was asked for; epoch milliseconds), and since
/// `read_ms` (when `keep` was read) whatever the grace.
pub fn gc(
    store: &Store,
    keep: &[ObjectId],
    grace: Duration,
    called_ms: u64,
    read_ms: u64,
) -> GitResult<GcReport> {
    // Every pack index is read first, strictly: a pack that cannot be read stops gc before anything is
    // deleted (its objects would otherwise look missing, and what they reach unreachable).
    let packs = pack::inventory(&store.odb.dir().join("pack"))?;
    let packed: HashSet<ObjectId> = packs.iter().flat_map(|p| p.ids.iter().copied()).collect();
    let stored = |id: &ObjectId| packed.contains(id) || store.odb.path_of(id).is_file();
    let since = called_ms
        .min(now_ms())
        .saturating_sub(millis(grace))
        .min(read_ms);
    let mut roots: Vec<ObjectId> = keep.to_vec();
    roots.extend(store.returned_for_gc(since, read_ms)?);
    let cache_path = store.stat_cache_path();
    let cache = StatCache::load_for_gc(&cache_path)?;
    roots.extend(cache.tree);
    // The file's own tree too, while a side file changes it: were the side file lost, the file's entries
    // would be trusted again.
    roots.extend(cache.since_file.as_ref().and_then(|since| since.file_tree));
    let mut reachable: HashSet<ObjectId> = cache.entries.values().map(|e| e.id).collect();
    cache.keep(&cache_path);
    let mut live_roots = HashSet::new();
    for root in roots {
        // A kept id whose tree is already gone cannot protect anything, and a missing sub-tree only what
        // it held: neither is an error for gc. A tree that cannot be read is: nothing is deleted, since
        // what it reaches is unknown.
        if reachable_from(&store.odb, &root, &mut reachable, &stored)? {
            live_roots.insert(root);
        }
    }
    let mut report = GcReport::default();
    // Objects are counted by id, once each, however many copies the store held (a loose copy beside a
    // packed one, the same object in two packs after a merge that did not finish).
    let mut held: HashSet<ObjectId> = packed.clone();
    let mut still: HashSet<ObjectId> = HashSet::new();
    let grace_cutoff = SystemTime::now()
        .checked_sub(grace)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let objects = store.odb.dir().to_path_buf();
    let Ok(fanout) = fs::read_dir(&objects) else {
        return Ok(report);
    };
    for dir in fanout.flatten() {
        let name = dir.file_name().to_string_lossy().into_owned();
        if name.len() != 2 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
            // Temporary object files a crash left behind, once older than the grace period.
            if name.starts_with("tmp_obj_") && is_older(&dir.path(), grace_cutoff) {
                free(&dir.path(), &mut report)?;
            }
            continue;
        }
        for entry in fs::read_dir(dir.path())
            .map_err(|e| GitError::io(&dir.path(), e))?
            .flatten()
        {
            let file = entry.file_name().to_string_lossy().into_owned();
            let hex = format!("{name}{file}");
            let Ok(id) = ObjectId::from_hex(hex.as_bytes()) else {
                // A copy of a user's object that a crash left half made (seeding across filesystems).
                if file.contains(".tmp-") && is_older(&entry.path(), grace_cutoff) {
                    free(&entry.path(), &mut report)?;
                }
                continue;
            };
            held.insert(id);
            if reachable.contains(&id) {
                still.insert(id);
            } else {
                free(&entry.path(), &mut report)?;
            }
        }
        let _ = fs::remove_dir(dir.path());
    }
    collect_packs(store, &packs, &reachable, &mut still, &mut report)?;
    report.objects_kept = still.len() as u64;
    report.objects_removed = held.difference(&still).count() as u64;
    remove_pack_leftovers(store, grace_cutoff, &mut report)?;
    remove_stray_temp_files(store, grace_cutoff, &mut report)?;
    for id in store.recorded_ids() {
        if !live_roots.contains(&id) && !store.odb.contains(&id) {
            store.remove_record(&id);
        }
    }
    Ok(report)
}

/// Collects the packs: a pack of rewind's own loses its unreachable objects (rewritten without them, or
/// deleted when none is reachable); a pack seeded from a user's repository is deleted when it holds no
/// reachable object; one that holds some is kept whole while the user's repository still has it (a hard
/// link: it takes no room of its own), else its reachable objects are copied whole into packs of the
/// store's own and it is deleted (black-box: the history of a repository seeded once, purged by its
/// user since, stayed in the store for good, a secret blob among it).
/// Every object still stored after this goes to `still`.
fn collect_packs(
    store: &Store,
    packs: &[pack::Listed],
    reachable: &HashSet<ObjectId>,
    still: &mut HashSet<ObjectId>,
    report: &mut GcReport,
) -> GitResult<()> {
    let dir = store.odb.dir().join("pack");
    let mut changed = false;
    let sources = crate::seed::pack_sources(&store.odb);
    for listed in packs {
        let live: Vec<ObjectId> = listed
            .ids
            .iter()
            .filter(|id| reachable.contains(*id))
            .copied()
            .collect();
        let whole = live.len() == listed.ids.len()
            || (!listed.own
                && !live.is_empty()
                && crate::seed::pack_source_holds(&sources, &listed.pack));
        if whole {
            still.extend(listed.ids.iter().copied());
            continue;
        }
        changed = true;
        if listed.own {
            let own = pack::OwnPack {
                pack: listed.pack.clone(),
                size: listed.size,
            };
            let rewritten = pack::rewrite(&dir, std::slice::from_ref(&own), |id| {
                reachable.contains(id)
            })?;
            still.extend(live);
            report.bytes_freed += rewritten.bytes_freed;
            continue;
        }
        // On disk before the seeded pack goes: a power loss must not leave neither.
        let written = copy_into_own_packs(store, &dir, &live)?;
        still.extend(live);
        let mut freed = GcReport::default();
        // The index first: without it no reader takes the pack.
        for ext in ["keep", "idx", "rev", "bitmap", "mtimes", "pack"] {
            free(&listed.pack.with_extension(ext), &mut freed)?;
        }
        report.bytes_freed += freed.bytes_freed.saturating_sub(written);
    }
    if changed {
        store.odb.packs_changed();
    }
    Ok(())
}

/// Size of the packs `copy_into_own_packs` writes before it starts another (entries are held in memory).
const COPY_PACK_BYTES: usize = 32 * 1024 * 1024;

/// Writes the objects `ids` (read whole, each checked against its id) into packs of the store's own, synced
/// (one over `IN_MEMORY_BLOB` as a loose object, synced, as a track stores it); the bytes they take.
fn copy_into_own_packs(store: &Store, dir: &std::path::Path, ids: &[ObjectId]) -> GitResult<u64> {
    use std::io::Read as _;
    let mut written = 0;
    let mut loose = 0;
    let mut entries = Vec::new();
    let mut held = 0;
    let mut flush = |entries: &mut Vec<pack::Entry>| -> GitResult<()> {
        if entries.is_empty() {
            return Ok(());
        }
        written += pack::size_on_disk(&pack::write_durable(dir, entries)?);
        entries.clear();
        Ok(())
    };
    for id in ids {
        let (kind, size, mut reader) = store.odb.open(id)?;
        let mut data = Vec::with_capacity(size as usize);
        reader
            .read_to_end(&mut data)
            .map_err(|e| GitError::Corrupt(format!("object {id}: {e}")))?;
        if crate::odb::Odb::hash(kind, &data)? != *id {
            return Err(GitError::Corrupt(format!(
                "object {id} does not hash to its id in its seeded pack; nothing of that pack is deleted"
            )));
        }
        if data.len() as u64 > crate::odb::IN_MEMORY_BLOB {
            store.odb.write_loose_durable(id, kind, &data)?;
            loose += fs::metadata(store.odb.path_of(id)).map_or(0, |m| m.len());
            continue;
        }
        let entry = pack::Entry::new(*id, kind, &data)
            .map_err(|e| GitError::Other(format!("compressing object {id}: {e}")))?;
        held += entry.raw.len();
        entries.push(entry);
        if held >= COPY_PACK_BYTES {
            flush(&mut entries)?;
            held = 0;
        }
    }
    flush(&mut entries)?;
    Ok(written + loose)
}

/// Removes what a crash left in the pack directory, once older than the grace period: half-made copies of a
/// user's pack or index (seeding across filesystems), and a pack without its index (seeding links the pack
/// first; gc removes the index first). Without its index no reader uses a pack. gc holds the store's lock,
/// so no seeding is between its two links now.
fn remove_pack_leftovers(
    store: &Store,
    cutoff: SystemTime,
    report: &mut GcReport,
) -> GitResult<()> {
    let dir = store.odb.dir().join("pack");
    let Ok(entries) = fs::read_dir(&dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let leftover = name.contains(".tmp-")
            || (name.ends_with(".pack") && !path.with_extension("idx").exists());
        if leftover && is_older(&path, cutoff) {
            free(&path, report)?;
        }
    }
    Ok(())
}

/// Removes the temporary files `write_atomically` leaves when a process dies between writing and renaming
/// one (`.NAME.tmp-PID-RAND`, beside the store's own files: its config, the stat cache, the records), once
/// older than the grace period (a file being written now is milliseconds old).
fn remove_stray_temp_files(
    store: &Store,
    cutoff: SystemTime,
    report: &mut GcReport,
) -> GitResult<()> {
    let rewind = store.dir.join("rewind");
    for dir in [store.dir.clone(), rewind.join("records"), rewind] {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let path = entry.path();
            if !(name.starts_with('.') && name.contains(".tmp-") && is_older(&path, cutoff)) {
                continue;
            }
            free(&path, report)?;
        }
    }
    Ok(())
}

fn is_older(path: &std::path::Path, cutoff: SystemTime) -> bool {
    fs::metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|modified| modified < cutoff)
}

/// Removes a file, counting the bytes freed; whether it was there to remove.
fn free(path: &std::path::Path, report: &mut GcReport) -> GitResult<bool> {
    let size = pack::remove_counted(path)?;
    report.bytes_freed += size.unwrap_or(0);
    Ok(size.is_some())
}

/// `duration` in milliseconds, at most `u64::MAX`: a grace period of more milliseconds than that keeps
/// everything (review: `--grace-seconds 9223372036854775808` wrapped to a grace of 0 and collected what
/// it was meant to keep).
pub(crate) fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
