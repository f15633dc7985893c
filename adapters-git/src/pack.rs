//! The store's own packs: the new objects of one track written as one pack (`pack-rewind-<sum>.pack` and
//! its version-2 index) instead of one loose file each, so a track that adds 40 objects creates two files,
//! not 40. Every entry is a whole object (no deltas), so packs are merged and pruned by copying entries.
//! Packs hardlinked from a user's repository keep their own names and are never rewritten.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use flate2::{Compress, Compression, FlushCompress, Status};
use gix::ObjectId;

use crate::error::{GitError, GitResult};
use crate::odb::{Kind, rand_suffix};

/// The name every pack rewind writes begins with.
pub const OWN_PREFIX: &str = "pack-rewind-";

/// Packs of the store's own smaller than this are merged once there are more than `MERGE_ABOVE` of them.
const SMALL_PACK: u64 = 8 * 1024 * 1024;
const MERGE_ABOVE: usize = 16;

/// One object as a pack entry: its header (kind and size) and its zlib-compressed content.
pub struct Entry {
    pub id: ObjectId,
    pub kind: Kind,
    pub size: u64,
    /// The entry's bytes as they stand in a pack.
    pub raw: Vec<u8>,
    /// Where the compressed content begins in `raw`.
    pub header_len: usize,
}

impl Entry {
    /// Compresses `data`, an object of `kind` whose id is `id`, as a pack entry.
    pub fn new(id: ObjectId, kind: Kind, data: &[u8]) -> io::Result<Entry> {
        let size = data.len() as u64;
        let mut raw = entry_header(kind, size);
        let header_len = raw.len();
        compress_into(data, &mut raw)?;
        Ok(Entry {
            id,
            kind,
            size,
            raw,
            header_len,
        })
    }

    /// The entry's compressed content.
    pub fn compressed(&self) -> &[u8] {
        &self.raw[self.header_len..]
    }
}

thread_local! {
    /// Each thread's compressor, reset for every object: a new one allocates and clears some 300 KB of
    /// state, several times the work of compressing a file of a few KB.
    static COMPRESSOR: RefCell<Compress> = RefCell::new(Compress::new(Compression::fast(), true));
}

/// Appends `data` to `out` as one zlib stream.
fn compress_into(data: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
    COMPRESSOR.with_borrow_mut(|compressor| {
        compressor.reset();
        // Deflate's worst case is a few bytes more than stored blocks: 5 per 16 KB block, and the header
        // and checksum.
        out.reserve(data.len() + data.len() / 16_000 * 5 + 64);
        loop {
            let consumed = compressor.total_in() as usize;
            let status = compressor
                .compress_vec(&data[consumed..], out, FlushCompress::Finish)
                .map_err(io::Error::other)?;
            match status {
                Status::StreamEnd => return Ok(()),
                Status::Ok | Status::BufError => out.reserve(out.capacity().max(64)),
            }
        }
    })
}

/// A pack entry's header: the kind in bits 4–6 of the first byte, the size in little-endian groups of
/// 4 then 7 bits, each byte but the last with its top bit set.
fn entry_header(kind: Kind, size: u64) -> Vec<u8> {
    let code: u8 = match kind {
        Kind::Tree => 2,
        Kind::Blob => 3,
    };
    let mut out = Vec::with_capacity(10);
    let mut byte = (code << 4) | (size & 0x0f) as u8;
    let mut rest = size >> 4;
    while rest != 0 {
        out.push(byte | 0x80);
        byte = (rest & 0x7f) as u8;
        rest >>= 7;
    }
    out.push(byte);
    out
}

/// Writes a pack of `count` entries under a temporary name, then its index, and renames both (the pack
/// first: a reader takes a pack only once its index is there).
struct Writer {
    dir: PathBuf,
    tmp: PathBuf,
    file: BufWriter<File>,
    hasher: gix::hash::Hasher,
    offset: u64,
    /// Each entry's id, the CRC-32 of its bytes and its offset.
    index: Vec<(ObjectId, u32, u64)>,
}

impl Writer {
    fn create(dir: &Path, count: usize) -> GitResult<Writer> {
        fs::create_dir_all(dir).map_err(|e| GitError::io(dir, e))?;
        let tmp = dir.join(format!(
            ".tmp-{}-{}.pack",
            std::process::id(),
            rand_suffix()
        ));
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| GitError::io(&tmp, e))?;
        let count = u32::try_from(count)
            .map_err(|_| GitError::Other("too many objects for one pack".to_owned()))?;
        let mut writer = Writer {
            dir: dir.to_path_buf(),
            tmp,
            file: BufWriter::with_capacity(256 * 1024, file),
            hasher: gix::hash::hasher(gix::hash::Kind::Sha1),
            offset: 0,
            index: Vec::new(),
        };
        let mut header = b"PACK".to_vec();
        header.extend_from_slice(&2u32.to_be_bytes());
        header.extend_from_slice(&count.to_be_bytes());
        writer.put(&header)?;
        Ok(writer)
    }

    fn put(&mut self, bytes: &[u8]) -> GitResult<()> {
        self.hasher.update(bytes);
        self.offset += bytes.len() as u64;
        self.file
            .write_all(bytes)
            .map_err(|e| GitError::io(&self.tmp, e))
    }

    fn add(&mut self, id: ObjectId, raw: &[u8]) -> GitResult<()> {
        self.index.push((id, crc32fast::hash(raw), self.offset));
        self.put(raw)
    }

    /// Ends the pack and writes its index; returns the pack's path. `durable`: both are on disk (and their
    /// names in the directory) before this returns, for a pack that replaces others about to be deleted.
    fn finish(self, durable: bool) -> GitResult<PathBuf> {
        let Writer {
            dir,
            tmp,
            mut file,
            hasher,
            index,
            ..
        } = self;
        let done = (|| {
            let sum = hasher
                .try_finalize()
                .map_err(|e| GitError::Other(format!("hashing a pack failed: {e}")))?;
            file.write_all(sum.as_bytes())
                .map_err(|e| GitError::io(&tmp, e))?;
            file.flush().map_err(|e| GitError::io(&tmp, e))?;
            if durable {
                file.get_ref()
                    .sync_all()
                    .map_err(|e| GitError::io(&tmp, e))?;
            }
            let idx = index_bytes(index, &sum)?;
            let stem = dir.join(format!("{OWN_PREFIX}{sum}"));
            let pack = stem.with_extension("pack");
            let idx_tmp = dir.join(format!(".tmp-{}-{}.idx", std::process::id(), rand_suffix()));
            let written = File::create(&idx_tmp).and_then(|mut f| {
                f.write_all(&idx)?;
                if durable { f.sync_all() } else { Ok(()) }
            });
            let renamed = written
                .and_then(|()| fs::rename(&tmp, &pack))
                .and_then(|()| fs::rename(&idx_tmp, stem.with_extension("idx")))
                .and_then(|()| {
                    if durable {
                        File::open(&dir)?.sync_all()
                    } else {
                        Ok(())
                    }
                });
            if let Err(e) = renamed {
                let _ = fs::remove_file(&idx_tmp);
                return Err(GitError::io(&pack, e));
            }
            Ok(pack)
        })();
        if done.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        done
    }
}

/// A version-2 pack index: the fan-out table, the sorted ids, their CRC-32s and offsets (those from 2 GiB
/// on in a table of 8-byte offsets), the pack's checksum and the index's own.
fn index_bytes(mut index: Vec<(ObjectId, u32, u64)>, pack_sum: &ObjectId) -> GitResult<Vec<u8>> {
    index.sort_by_key(|(id, _, _)| *id);
    let mut out = Vec::with_capacity(8 + 1024 + index.len() * 28 + 40);
    out.extend_from_slice(&[0xff, b't', b'O', b'c']);
    out.extend_from_slice(&2u32.to_be_bytes());
    let mut fanout = [0u32; 256];
    for (id, _, _) in &index {
        fanout[usize::from(id.as_bytes()[0])] += 1;
    }
    let mut running = 0u32;
    for count in fanout {
        running += count;
        out.extend_from_slice(&running.to_be_bytes());
    }
    for (id, _, _) in &index {
        out.extend_from_slice(id.as_bytes());
    }
    for (_, crc, _) in &index {
        out.extend_from_slice(&crc.to_be_bytes());
    }
    let mut large = Vec::new();
    for (_, _, offset) in &index {
        let small = match u32::try_from(*offset) {
            Ok(small) if small < 0x8000_0000 => small,
            _ => {
                let at = u32::try_from(large.len())
                    .map_err(|_| GitError::Other("pack too large".to_owned()))?;
                large.push(*offset);
                0x8000_0000 | at
            }
        };
        out.extend_from_slice(&small.to_be_bytes());
    }
    for offset in large {
        out.extend_from_slice(&offset.to_be_bytes());
    }
    out.extend_from_slice(pack_sum.as_bytes());
    let mut hasher = gix::hash::hasher(gix::hash::Kind::Sha1);
    hasher.update(&out);
    let sum = hasher
        .try_finalize()
        .map_err(|e| GitError::Other(format!("hashing an index failed: {e}")))?;
    out.extend_from_slice(sum.as_bytes());
    Ok(out)
}

/// Writes `entries` (distinct ids) as one pack in `dir`; returns the pack's path.
pub fn write(dir: &Path, entries: &[Entry]) -> GitResult<PathBuf> {
    // Like a loose object, a new pack is not synced: it replaces nothing.
    write_pack(dir, entries, false)
}

/// `write`, synced before it returns: for a pack that replaces another (the other is deleted next).
pub fn write_durable(dir: &Path, entries: &[Entry]) -> GitResult<PathBuf> {
    write_pack(dir, entries, true)
}

fn write_pack(dir: &Path, entries: &[Entry], durable: bool) -> GitResult<PathBuf> {
    let mut writer = Writer::create(dir, entries.len())?;
    let added = entries
        .iter()
        .try_for_each(|entry| writer.add(entry.id, &entry.raw));
    if let Err(error) = added {
        let _ = fs::remove_file(&writer.tmp);
        return Err(error);
    }
    writer.finish(durable)
}

/// One of the store's own packs.
#[derive(Debug, Clone)]
pub struct OwnPack {
    /// The pack file (its index beside it, `.idx`).
    pub pack: PathBuf,
    pub size: u64,
}

impl OwnPack {
    pub fn idx(&self) -> PathBuf {
        self.pack.with_extension("idx")
    }
}

/// The store's own packs in `dir` that have their index (a pack without one is a crash's leftover).
pub fn own_packs(dir: &Path) -> Vec<OwnPack> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut packs: Vec<OwnPack> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let name = name.to_str()?;
            if !(name.starts_with(OWN_PREFIX) && name.ends_with(".pack")) {
                return None;
            }
            let pack = entry.path();
            let size = entry.metadata().ok()?.len();
            pack.with_extension("idx")
                .is_file()
                .then_some(OwnPack { pack, size })
        })
        .collect();
    packs.sort_by(|a, b| a.pack.cmp(&b.pack));
    packs
}

/// One pack of the store, with the ids its index lists.
pub struct Listed {
    /// The pack file (its index beside it, `.idx`).
    pub pack: PathBuf,
    /// Whether rewind wrote it (else it was seeded from a user's repository).
    pub own: bool,
    pub size: u64,
    pub ids: Vec<ObjectId>,
}

/// Every pack in `dir` (rewind's own and seeded ones) with its ids, each index read strictly: a directory
/// or an index that cannot be read is an error. Temporary files and packs without their index (a crash's
/// leftovers, which no reader uses) are left out.
pub fn inventory(dir: &Path) -> GitResult<Vec<Listed>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(GitError::io(dir, e)),
    };
    let mut packs = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| GitError::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let pack = entry.path().with_extension("pack");
        if !name.ends_with(".idx") || name.starts_with(".tmp-") {
            continue;
        }
        let size = match fs::metadata(&pack) {
            Ok(meta) => meta.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(GitError::io(&pack, e)),
        };
        let ids = index_at(&entry.path())?.iter().map(|e| e.oid).collect();
        packs.push(Listed {
            own: name.starts_with(OWN_PREFIX),
            pack,
            size,
            ids,
        });
    }
    Ok(packs)
}

/// The ids an own pack holds, read from its index.
pub fn ids(pack: &OwnPack) -> GitResult<Vec<ObjectId>> {
    Ok(open_index(pack)?.iter().map(|e| e.oid).collect())
}

fn open_index(pack: &OwnPack) -> GitResult<gix::odb::pack::index::File> {
    index_at(&pack.idx())
}

fn index_at(idx: &Path) -> GitResult<gix::odb::pack::index::File> {
    gix::odb::pack::index::File::at(idx, gix::hash::Kind::Sha1)
        .map_err(|e| GitError::Corrupt(format!("pack index {}: {e}", idx.display())))
}

/// What `rewrite` did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Rewritten {
    /// Objects copied into the new pack.
    pub kept: u64,
    /// Objects left out (duplicates across the packs not counted).
    pub dropped: u64,
    /// Bytes of the packs and indexes removed, less those of the pack written and its index.
    pub bytes_freed: u64,
}

/// Replaces the own packs `sources` by one pack holding the objects `keep` accepts (none when it accepts
/// none), copying each entry as it is after checking it against the CRC-32 its index records. The new
/// pack is in place before any source is removed; a source's index goes before its pack.
pub fn rewrite(
    dir: &Path,
    sources: &[OwnPack],
    keep: impl Fn(&ObjectId) -> bool,
) -> GitResult<Rewritten> {
    let mut report = Rewritten::default();
    // Each kept entry: its source, offset, length and CRC.
    let mut chosen: Vec<(ObjectId, usize, u64, u64, u32)> = Vec::new();
    let mut seen = HashSet::new();
    for (at, source) in sources.iter().enumerate() {
        let index = open_index(source)?;
        let mut entries: Vec<(ObjectId, u64, u32)> = index
            .iter()
            .map(|e| (e.oid, e.pack_offset, e.crc32.unwrap_or(0)))
            .collect();
        entries.sort_by_key(|(_, offset, _)| *offset);
        let data_end = source.size.saturating_sub(20);
        for (i, (id, offset, crc)) in entries.iter().enumerate() {
            let end = entries.get(i + 1).map_or(data_end, |next| next.1);
            if end <= *offset {
                return Err(GitError::Corrupt(format!(
                    "pack {}: entry {id} has no bytes",
                    source.pack.display()
                )));
            }
            if !seen.insert(*id) {
                continue;
            }
            if keep(id) {
                chosen.push((*id, at, *offset, end - offset, *crc));
            } else {
                report.dropped += 1;
            }
        }
    }
    let mut written = None;
    if !chosen.is_empty() {
        let files = sources
            .iter()
            .map(|s| File::open(&s.pack).map_err(|e| GitError::io(&s.pack, e)))
            .collect::<GitResult<Vec<_>>>()?;
        let mut writer = Writer::create(dir, chosen.len())?;
        let mut buffer = Vec::new();
        let copied = (|| {
            for (id, at, offset, len, crc) in &chosen {
                buffer.resize(*len as usize, 0);
                files[*at]
                    .read_exact_at(&mut buffer, *offset)
                    .map_err(|e| GitError::io(&sources[*at].pack, e))?;
                if crc32fast::hash(&buffer) != *crc {
                    return Err(GitError::Corrupt(format!(
                        "pack {}: entry {id} does not match its index",
                        sources[*at].pack.display()
                    )));
                }
                writer.add(*id, &buffer)?;
            }
            Ok(())
        })();
        if let Err(error) = copied {
            let _ = fs::remove_file(&writer.tmp);
            return Err(error);
        }
        // On disk before any source is deleted: a power loss must not leave neither.
        written = Some(writer.finish(true)?);
        report.kept = chosen.len() as u64;
    }
    for source in sources {
        // The new pack can be one of the sources (the same objects make the same pack).
        if written.as_ref() == Some(&source.pack) {
            continue;
        }
        for file in [source.idx(), source.pack.clone()] {
            report.bytes_freed += remove_counted(&file)?.unwrap_or(0);
        }
    }
    // What the new pack and its index take is not freed (black-box: gc reported the whole old pack).
    if let Some(pack) = written.filter(|pack| sources.iter().all(|s| &s.pack != pack)) {
        report.bytes_freed = report.bytes_freed.saturating_sub(size_on_disk(&pack));
    }
    Ok(report)
}

/// The bytes a pack and its index take on disk (`store::allocated`).
pub fn size_on_disk(pack: &Path) -> u64 {
    [pack.to_path_buf(), pack.with_extension("idx")]
        .iter()
        .map(|file| fs::metadata(file).map_or(0, |m| crate::store::allocated(&m)))
        .sum()
}

/// Removes a file; the bytes it took on disk (`store::allocated`), or `None` when it was not there.
pub fn remove_counted(path: &Path) -> GitResult<Option<u64>> {
    let size = fs::metadata(path)
        .map(|m| crate::store::allocated(&m))
        .unwrap_or(0);
    match fs::remove_file(path) {
        Ok(()) => Ok(Some(size)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(GitError::io(path, e)),
    }
}

/// Merges the store's small own packs into one once there are more than `MERGE_ABOVE` of them, so lookups
/// never search many indexes. Returns whether packs changed. A pack whose index cannot be read is left out
/// (and left as it is: its objects fail closed when read); a merge that fails changes nothing.
pub fn merge_small(dir: &Path) -> GitResult<bool> {
    let small: Vec<OwnPack> = own_packs(dir)
        .into_iter()
        .filter(|p| p.size < SMALL_PACK)
        .collect();
    // Counted before any index is opened: this runs after every pack a track writes.
    if small.len() <= MERGE_ABOVE {
        return Ok(false);
    }
    let small: Vec<OwnPack> = small
        .into_iter()
        .filter(|p| open_index(p).is_ok())
        .collect();
    if small.len() <= MERGE_ABOVE {
        return Ok(false);
    }
    rewrite(dir, &small, |_| true)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::odb::Odb;

    fn object(kind: Kind, data: &[u8]) -> Entry {
        let id = Odb::hash(kind, data).expect("hash");
        Entry::new(id, kind, data).expect("entry")
    }

    #[test]
    fn entry_headers_follow_gits_size_encoding() {
        assert_eq!(entry_header(Kind::Blob, 0), vec![0x30]);
        assert_eq!(entry_header(Kind::Blob, 15), vec![0x3f]);
        assert_eq!(entry_header(Kind::Tree, 16), vec![0xa0, 0x01]);
        // 3000 = 0xbb8: low nibble 8, then 0xbb = 187 in 7-bit groups (0x3b, then 1).
        assert_eq!(entry_header(Kind::Blob, 3000), vec![0xb8, 0xbb, 0x01]);
    }

    #[test]
    fn a_written_pack_is_read_back_by_gix_and_merges_keep_every_object() {
        let dir = tempfile::tempdir().expect("tempdir");
        let objects = dir.path().join("objects");
        let pack_dir = objects.join("pack");
        let entries: Vec<Entry> = (0..40)
            .map(|i| {
                object(
                    Kind::Blob,
                    format!("content {i}\n").repeat(i * 50).as_bytes(),
                )
            })
            .chain([object(Kind::Tree, b"")])
            .collect();
        let (first, second) = entries.split_at(20);
        write(&pack_dir, first).expect("first pack");
        write(&pack_dir, second).expect("second pack");
        let odb = Odb::new(objects.clone());
        let check = |odb: &Odb| {
            for entry in &entries {
                let (kind, size, _) = odb.open(&entry.id).expect("stored");
                assert_eq!((kind, size), (entry.kind, entry.size));
                assert_eq!(
                    Odb::hash(kind, &odb.read(&entry.id, kind).expect("read")).ok(),
                    Some(entry.id)
                );
            }
        };
        check(&odb);
        let packs = own_packs(&pack_dir);
        assert_eq!(packs.len(), 2);
        let merged = rewrite(&pack_dir, &packs, |_| true).expect("merge");
        assert_eq!((merged.kept, merged.dropped), (41, 0));
        assert_eq!(own_packs(&pack_dir).len(), 1);
        check(&Odb::new(objects.clone()));
        // Pruned: the tree goes, the blobs stay.
        let tree = entries[40].id;
        let pruned = rewrite(&pack_dir, &own_packs(&pack_dir), |id| *id != tree).expect("prune");
        assert_eq!((pruned.kept, pruned.dropped), (40, 1));
        let odb = Odb::new(objects);
        assert!(!odb.contains(&tree));
        assert!(entries[..40].iter().all(|e| odb.contains(&e.id)));
    }

    #[test]
    fn a_corrupt_entry_stops_a_rewrite_before_anything_is_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pack_dir = dir.path().join("pack");
        let entries: Vec<Entry> = (0..3)
            .map(|i| object(Kind::Blob, format!("blob {i}").as_bytes()))
            .collect();
        let pack = write(&pack_dir, &entries).expect("pack");
        let mut bytes = fs::read(&pack).expect("read");
        bytes[14] ^= 0xff;
        fs::write(&pack, bytes).expect("corrupt");
        let packs = own_packs(&pack_dir);
        assert!(matches!(
            rewrite(&pack_dir, &packs, |_| true),
            Err(GitError::Corrupt(_))
        ));
        assert!(pack.is_file() && pack.with_extension("idx").is_file());
        assert_eq!(own_packs(&pack_dir).len(), 1, "no new pack was left");
    }
}
