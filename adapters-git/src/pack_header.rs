//! The sizes of the blobs a pack holds, read with positioned reads (`pread`) of the pack in its order, a
//! window of 32 KiB at a time (`Window`), rather than through a memory map. Seeding checks the size of every blob it adopts from the user's pack
//! (SPEC 2.1, `adopt_seeded`): through a map, every page of the pack that holds an entry's header would
//! become part of this process's memory (most of a pack of small files, 100 MB of a 100,000-file
//! repository's), and every lookup would go through the object database's shared handle and its lock.
//!
//! An entry's header (pack format version 2): a byte whose bits 4–6 are the kind (1 commit, 2 tree, 3 blob,
//! 4 tag, 6 delta against an earlier entry, 7 delta against an object named by id) and whose low 4 bits
//! start the size, continued in groups of 7 bits while the top bit is set. A delta entry then names its
//! base (a backwards distance, or an id), and its size is that of the delta: the object's own size is the
//! second number at the start of the inflated delta, and its kind is its base's.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use flate2::{Decompress, FlushDecompress};
use gix::ObjectId;

use crate::error::{GitError, GitResult};

/// The kind code of a blob entry.
const BLOB: u8 = 3;
const OFS_DELTA: u8 = 6;
const REF_DELTA: u8 = 7;
/// How many bytes of an entry are read for its header (a size and a base take at most 10 + 20).
const HEAD_READ: usize = 32;
/// How many compressed bytes of a delta are read at most for the two sizes it begins with.
const DELTA_READ_MAX: usize = 4096;
/// Longer chains of deltas are taken for damage (git's default depth is 50; gc's aggressive one 250).
const MAX_CHAIN: usize = 10_000;

/// The size of each of `ids` that the pack of the index `idx` holds as a blob. An id the pack does not
/// hold, holds as another kind, or whose entry cannot be read is left out: the caller treats it as not
/// verified.
pub fn blob_sizes(idx: &Path, ids: &[ObjectId]) -> GitResult<Vec<(ObjectId, u64)>> {
    let index = gix::odb::pack::index::File::at(idx, gix::hash::Kind::Sha1)
        .map_err(|e| GitError::Corrupt(format!("pack index {}: {e}", idx.display())))?;
    let pack_path = idx.with_extension("pack");
    let pack = File::open(&pack_path).map_err(|e| GitError::io(&pack_path, e))?;
    let mut held: Vec<(ObjectId, u64)> = ids
        .iter()
        .filter_map(|id| {
            index
                .lookup(id)
                .map(|at| (*id, index.pack_offset_at_index(at)))
        })
        .collect();
    // In the pack's order: neighbouring entries share the pages the kernel reads ahead.
    held.sort_unstable_by_key(|(_, offset)| *offset);
    let reader = Reader {
        pack: &pack,
        index: &index,
    };
    let sizes = crate::track::parallel_map_with(
        &held,
        || (HashMap::new(), Window::new()),
        |(kinds, window): &mut (HashMap<u64, u8>, Window), (id, offset)| {
            Ok(reader
                .blob_size(window, *offset, kinds)
                .map(|size| (*id, size)))
        },
    )?;
    Ok(sizes.into_iter().flatten().collect())
}

struct Reader<'a> {
    pack: &'a File,
    index: &'a gix::odb::pack::index::File,
}

/// The part of the pack a thread read last. Its entries are looked at in the pack's order, and most of a
/// pack of small files is the blobs looked at, so one read of a window answers for the headers of dozens of
/// entries: a few thousand reads for a 100,000-file repository's pack rather than one per entry.
struct Window {
    start: u64,
    len: usize,
    bytes: Box<[u8]>,
}

/// How much of the pack a window holds (entries of files of a few KB take one or two KB each).
const WINDOW: usize = 32 * 1024;

impl Window {
    fn new() -> Window {
        Window {
            start: 0,
            len: 0,
            bytes: vec![0u8; WINDOW].into_boxed_slice(),
        }
    }

    /// Fills `buf` from `offset` as far as the file goes, as `read_at_most` does: from the window when it
    /// holds the whole range; otherwise a read ahead, from `offset`, refills it. A read behind the window
    /// (a delta's base) goes to the file directly and leaves the window as it was for the next entry.
    fn read(&mut self, pack: &File, buf: &mut [u8], offset: u64) -> Option<usize> {
        let end = offset.checked_add(buf.len() as u64)?;
        let within = offset >= self.start && end <= self.start + self.len as u64;
        if !within {
            if offset < self.start || buf.len() > WINDOW {
                return read_at_most(pack, buf, offset);
            }
            self.len = 0;
            self.start = offset;
            self.len = read_at_most(pack, &mut self.bytes, offset)?;
        }
        let from = usize::try_from(offset - self.start).ok()?;
        let count = buf.len().min(self.len.saturating_sub(from));
        buf[..count].copy_from_slice(&self.bytes[from..from + count]);
        (count > 0).then_some(count)
    }
}

/// An entry's header.
struct Head {
    kind: u8,
    /// The size the header gives: the object's, or the delta's for a delta entry.
    size: u64,
    /// Where a delta's base entry starts (none for a whole object).
    base: Option<u64>,
    /// Where the entry's compressed data starts.
    data: u64,
}

impl Reader<'_> {
    /// The size of the object at `offset` when it is a blob. `kinds` remembers the kinds of the entries
    /// found on the way (bases are shared by many deltas).
    fn blob_size(
        &self,
        window: &mut Window,
        offset: u64,
        kinds: &mut HashMap<u64, u8>,
    ) -> Option<u64> {
        let head = self.head(window, offset)?;
        match head.base {
            None => (head.kind == BLOB).then_some(head.size),
            Some(base) => {
                if self.kind_at(window, base, kinds)? != BLOB {
                    return None;
                }
                self.delta_result_size(window, head.data)
            }
        }
    }

    /// The kind of the object at `offset`: its own, or the one its chain of bases ends in.
    fn kind_at(
        &self,
        window: &mut Window,
        offset: u64,
        kinds: &mut HashMap<u64, u8>,
    ) -> Option<u8> {
        let mut chain = Vec::new();
        let mut at = offset;
        let kind = loop {
            if let Some(kind) = kinds.get(&at) {
                break *kind;
            }
            if chain.len() >= MAX_CHAIN {
                return None;
            }
            chain.push(at);
            let head = self.head(window, at)?;
            match head.base {
                None => break head.kind,
                Some(base) => at = base,
            }
        };
        for entry in chain {
            kinds.insert(entry, kind);
        }
        Some(kind)
    }

    /// The header of the entry at `offset` (none when it cannot be read or is not a known kind).
    fn head(&self, window: &mut Window, offset: u64) -> Option<Head> {
        let mut buf = [0u8; HEAD_READ];
        let read = window.read(self.pack, &mut buf, offset)?;
        let mut bytes = buf[..read].iter().copied();
        let mut byte = bytes.next()?;
        let kind = (byte >> 4) & 0x07;
        let mut size = u64::from(byte & 0x0f);
        let mut shift = 4u32;
        let mut used = 1u64;
        while byte & 0x80 != 0 {
            byte = bytes.next()?;
            used += 1;
            if shift > 63 - 7 {
                return None;
            }
            size |= u64::from(byte & 0x7f) << shift;
            shift += 7;
        }
        let base = match kind {
            1..=4 => None,
            OFS_DELTA => {
                byte = bytes.next()?;
                used += 1;
                let mut distance = u64::from(byte & 0x7f);
                while byte & 0x80 != 0 {
                    byte = bytes.next()?;
                    used += 1;
                    distance = distance.checked_add(1)?.checked_mul(128)? | u64::from(byte & 0x7f);
                }
                // A base stands before its delta.
                Some(offset.checked_sub(distance).filter(|_| distance > 0)?)
            }
            REF_DELTA => {
                let raw: Vec<u8> = bytes.by_ref().take(20).collect();
                used += 20;
                let raw: [u8; 20] = raw.try_into().ok()?;
                let id = ObjectId::from(raw);
                let at = self.index.lookup(id)?;
                Some(self.index.pack_offset_at_index(at))
            }
            _ => return None,
        };
        Some(Head {
            kind,
            size,
            base,
            data: offset + used,
        })
    }

    /// The size of the object a delta whose compressed data starts at `data` makes: the second of the two
    /// numbers its inflated data begins with (the base's size, then the result's).
    fn delta_result_size(&self, window: &mut Window, data: u64) -> Option<u64> {
        let mut want = 64;
        loop {
            let mut compressed = vec![0u8; want];
            let read = window.read(self.pack, &mut compressed, data)?;
            let mut out = [0u8; 32];
            let mut inflate = Decompress::new(true);
            // Damaged data answers nothing (what was decoded before the error is not trusted); a short
            // read decodes what it can.
            inflate
                .decompress(&compressed[..read], &mut out, FlushDecompress::None)
                .ok()?;
            let produced = usize::try_from(inflate.total_out()).ok()?.min(out.len());
            let mut numbers = out[..produced].iter().copied();
            if let Some(size) = varint(&mut numbers).and_then(|_| varint(&mut numbers)) {
                return Some(size);
            }
            if read < want || want >= DELTA_READ_MAX {
                return None;
            }
            want *= 4;
        }
    }
}

/// A delta's size number: 7 bits at a time, least significant first, while the top bit is set.
fn varint(bytes: &mut impl Iterator<Item = u8>) -> Option<u64> {
    let mut value = 0u64;
    let mut shift = 0u32;
    loop {
        let byte = bytes.next()?;
        if shift > 63 - 7 {
            return None;
        }
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
        shift += 7;
    }
}

/// Fills `buf` from `offset` as far as the file goes; the bytes read (none at or past its end, or on an
/// error).
fn read_at_most(file: &File, buf: &mut [u8], offset: u64) -> Option<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    (filled > 0).then_some(filled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn sizes_of(idx: &Path, ids: &[ObjectId]) -> HashMap<ObjectId, u64> {
        blob_sizes(idx, ids).expect("read").into_iter().collect()
    }

    /// A window answers every read as a direct positioned read of the file does: within it, across its
    /// end, behind it (a delta's base), longer than it, at and past the file's end.
    #[test]
    fn a_window_reads_what_the_file_holds() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("pack");
        let content: Vec<u8> = (0..(WINDOW * 3 + 1000))
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        std::fs::write(&path, &content).expect("write");
        let file = File::open(&path).expect("open");
        let mut window = Window::new();
        let end = content.len() as u64;
        let reads: &[(u64, usize)] = &[
            (0, 32),
            (100, 32),
            (WINDOW as u64 - 10, 32),
            (WINDOW as u64 - 20, 4096),
            (50, 64),
            (2 * WINDOW as u64, WINDOW + 1),
            (2 * WINDOW as u64 + 5, 256),
            (end - 10, 32),
            (end - 40, 32),
            (end, 32),
            (end + 100, 32),
        ];
        for &(offset, len) in reads {
            let mut through_window = vec![0u8; len];
            let mut direct = vec![0u8; len];
            let got = window.read(&file, &mut through_window, offset);
            let want = read_at_most(&file, &mut direct, offset);
            assert_eq!(got, want, "bytes read at {offset} (+{len})");
            if let Some(n) = want {
                let from = usize::try_from(offset).expect("small");
                assert_eq!(through_window[..n], content[from..from + n]);
            }
        }
    }

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .current_dir(dir)
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t.invalid",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .output()
            .expect("git runs");
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).expect("utf-8")
    }

    /// Oracle: `git cat-file --batch-check` for every object of a packed repository whose blobs are stored
    /// as deltas (versions of the same files), whole, empty and large.
    #[test]
    fn blob_sizes_match_git_for_every_object_of_a_pack_with_deltas() {
        let repo = tempfile::tempdir().expect("tempdir");
        let dir = repo.path();
        git(dir, &["init", "-q"]);
        let base: String = (0..400)
            .map(|i| format!("line {i} of a file that changes a little in each version\n"))
            .collect();
        for version in 0..6 {
            for file in 0..8 {
                let text = format!(
                    "{base}version {version} of file {file}\n{}",
                    "x".repeat(version * 97)
                );
                std::fs::write(dir.join(format!("f{file}.txt")), text).expect("write");
            }
            std::fs::write(dir.join("empty"), "").expect("write");
            std::fs::write(
                dir.join("big.bin"),
                (0..200_000u32)
                    .map(|i| (i * 7 + version as u32) as u8)
                    .collect::<Vec<u8>>(),
            )
            .expect("write");
            git(dir, &["add", "-A"]);
            git(dir, &["commit", "-q", "-m", &format!("v{version}")]);
        }
        git(dir, &["gc", "-q", "--aggressive"]);
        let listed = git(
            dir,
            &[
                "cat-file",
                "--batch-all-objects",
                "--batch-check=%(objectname) %(objecttype) %(objectsize) %(deltabase)",
            ],
        );
        let mut expected = HashMap::new();
        let mut ids = Vec::new();
        let mut deltas = 0;
        for line in listed.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            let id = ObjectId::from_hex(fields[0].as_bytes()).expect("id");
            ids.push(id);
            if fields[3] != "0000000000000000000000000000000000000000" {
                deltas += 1;
            }
            if fields[1] == "blob" {
                expected.insert(id, fields[2].parse::<u64>().expect("size"));
            }
        }
        assert!(deltas > 20, "the pack stores versions as deltas: {listed}");
        // An id the pack does not hold is left out.
        ids.push(ObjectId::from_hex(b"0123456789012345678901234567890123456789").expect("id"));
        let only_pack = || {
            let packs: Vec<_> = std::fs::read_dir(dir.join(".git/objects/pack"))
                .expect("packs")
                .map(|e| e.expect("entry").path())
                .filter(|p| p.extension().is_some_and(|e| e == "idx"))
                .collect();
            assert_eq!(packs.len(), 1);
            packs[0].clone()
        };
        // Deltas naming their base by offset (git's default), then by id.
        assert_eq!(sizes_of(&only_pack(), &ids), expected);
        git(
            dir,
            &[
                "-c",
                "repack.useDeltaBaseOffset=false",
                "repack",
                "-a",
                "-d",
                "-f",
                "-q",
            ],
        );
        let idx = only_pack();
        let pack = std::fs::read(idx.with_extension("pack")).expect("read the pack");
        let index = gix::odb::pack::index::File::at(&idx, gix::hash::Kind::Sha1).expect("index");
        let by_id = index
            .iter()
            .filter(|entry| {
                let at = usize::try_from(entry.pack_offset).expect("offset");
                (pack[at] >> 4) & 0x07 == REF_DELTA
            })
            .count();
        assert!(
            by_id > 20,
            "the repacked pack's deltas name their base by id"
        );
        assert_eq!(sizes_of(&only_pack(), &ids), expected);
    }

    /// A damaged entry is left out, not guessed: its header bytes overwritten with an unknown kind.
    #[test]
    fn a_damaged_entry_is_left_out() {
        let repo = tempfile::tempdir().expect("tempdir");
        let dir = repo.path();
        git(dir, &["init", "-q"]);
        std::fs::write(dir.join("a"), "a\n").expect("write");
        std::fs::write(dir.join("b"), "b\n").expect("write");
        git(dir, &["add", "-A"]);
        git(dir, &["commit", "-q", "-m", "one"]);
        git(dir, &["gc", "-q"]);
        let a =
            ObjectId::from_hex(git(dir, &["rev-parse", "HEAD:a"]).trim().as_bytes()).expect("id");
        let b =
            ObjectId::from_hex(git(dir, &["rev-parse", "HEAD:b"]).trim().as_bytes()).expect("id");
        let idx = std::fs::read_dir(dir.join(".git/objects/pack"))
            .expect("packs")
            .map(|e| e.expect("entry").path())
            .find(|p| p.extension().is_some_and(|e| e == "idx"))
            .expect("an index");
        let index = gix::odb::pack::index::File::at(&idx, gix::hash::Kind::Sha1).expect("index");
        let offset = index.pack_offset_at_index(index.lookup(a).expect("a is packed"));
        let pack = idx.with_extension("pack");
        let mut bytes = std::fs::read(&pack).expect("read");
        bytes[usize::try_from(offset).expect("offset")] = 0x50; // kind 5: none
        std::fs::set_permissions(&pack, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .expect("writable");
        std::fs::write(&pack, bytes).expect("write");
        assert_eq!(sizes_of(&idx, &[a, b]), HashMap::from([(b, 2)]));
    }
}
