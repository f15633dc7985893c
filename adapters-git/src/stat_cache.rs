//! The stat cache, like git's index: for every tracked file, the stat data seen when it was last hashed
//! and its blob id, so a re-track reads no content for files whose stat data is unchanged.
//!
//! A file modified within `RACY_MARGIN` before the cache was built is "racy" (its modification could fall
//! in the same timestamp tick as our read) and is hashed again next time, as git does. The cache also keeps
//! the tree id of every directory of the last snapshot, so a re-track rewrites only the trees of
//! directories that changed. The file ends with a CRC-32 of its content; a cache that fails to parse or to
//! verify is ignored (everything is hashed again, nothing wrong is returned).

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use gix::ObjectId;

use crate::error::GitResult;
use crate::tree::Mode;

const MAGIC: &[u8] = b"RWSTAT2\n";
/// How close to the start of a track a modification counts as racy, in nanoseconds (covers filesystems
/// whose timestamps are as coarse as one second).
const RACY_MARGIN_NS: i128 = 1_000_000_000;

/// The stat data that decides whether a file must be hashed again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// File, executable or symlink.
    pub mode: Mode,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i128,
    /// Status change time, nanoseconds since the epoch.
    pub ctime_ns: i128,
    /// Inode.
    pub ino: u64,
    /// Device.
    pub dev: u64,
}

impl Stat {
    /// The stat data of `meta` (from `symlink_metadata`) with the mode it is tracked as.
    pub fn of(meta: &fs::Metadata, mode: Mode) -> Stat {
        Stat {
            mode,
            size: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
            ino: meta.ino(),
            dev: meta.dev(),
        }
    }
}

/// One cached file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheEntry {
    /// Its stat data when hashed.
    pub stat: Stat,
    /// Its blob.
    pub id: ObjectId,
}

/// The cache: the last tracked tree and the stat data of its files.
#[derive(Clone, Debug, Default)]
pub struct StatCache {
    /// When the track that wrote it began, nanoseconds since the epoch.
    pub started_ns: i128,
    /// The tree that track returned.
    pub tree: Option<ObjectId>,
    /// Per worktree-relative path.
    pub entries: HashMap<String, CacheEntry>,
    /// The tree id of every directory of `tree` (`""` is the root).
    pub dirs: HashMap<String, ObjectId>,
}

impl StatCache {
    /// The blob of `path` when its stat data is unchanged and it is not racy.
    pub fn fresh(&self, path: &str, stat: &Stat) -> Option<ObjectId> {
        let entry = self.entries.get(path)?;
        let racy = entry.stat.mtime_ns >= self.started_ns - RACY_MARGIN_NS;
        (entry.stat == *stat && !racy).then_some(entry.id)
    }

    /// Reads the cache; a missing, unreadable or corrupt cache is empty (costing only re-hashing).
    pub fn load(path: &Path) -> StatCache {
        fs::read(path)
            .ok()
            .and_then(|data| parse(&data))
            .unwrap_or_default()
    }

    /// Writes the cache atomically.
    pub fn save(&self, path: &Path) -> GitResult<()> {
        let mut data = Vec::with_capacity(64 + self.entries.len() * 96);
        data.extend_from_slice(MAGIC);
        data.extend_from_slice(&self.started_ns.to_le_bytes());
        match &self.tree {
            Some(id) => {
                data.push(1);
                data.extend_from_slice(id.as_bytes());
            }
            None => data.push(0),
        }
        data.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        // Order does not matter: the cache is read back into a map.
        for (path, entry) in &self.entries {
            data.extend_from_slice(&(path.len() as u32).to_le_bytes());
            data.extend_from_slice(path.as_bytes());
            data.push(match entry.stat.mode {
                Mode::File => 0,
                Mode::Exec => 1,
                Mode::Link => 2,
                Mode::Tree => 3,
            });
            data.extend_from_slice(&entry.stat.size.to_le_bytes());
            data.extend_from_slice(&entry.stat.mtime_ns.to_le_bytes());
            data.extend_from_slice(&entry.stat.ctime_ns.to_le_bytes());
            data.extend_from_slice(&entry.stat.ino.to_le_bytes());
            data.extend_from_slice(&entry.stat.dev.to_le_bytes());
            data.extend_from_slice(entry.id.as_bytes());
        }
        data.extend_from_slice(&(self.dirs.len() as u64).to_le_bytes());
        for (dir, id) in &self.dirs {
            data.extend_from_slice(&(dir.len() as u32).to_le_bytes());
            data.extend_from_slice(dir.as_bytes());
            data.extend_from_slice(id.as_bytes());
        }
        let sum = crc32fast::hash(&data);
        data.extend_from_slice(&sum.to_le_bytes());
        crate::store::write_atomically(path, &data)
    }
}

fn parse(data: &[u8]) -> Option<StatCache> {
    let (body, sum) = data.split_at(data.len().checked_sub(4)?);
    if crc32fast::hash(body).to_le_bytes() != sum {
        return None;
    }
    let mut r = Reader(body.strip_prefix(MAGIC)?);
    let started_ns = i128::from_le_bytes(r.take(16)?.try_into().ok()?);
    let tree = match r.take(1)?[0] {
        1 => Some(ObjectId::try_from(r.take(20)?).ok()?),
        _ => None,
    };
    let count = u64::from_le_bytes(r.take(8)?.try_into().ok()?);
    let mut entries = HashMap::with_capacity(count.min(1 << 20) as usize);
    for _ in 0..count {
        let len = u32::from_le_bytes(r.take(4)?.try_into().ok()?) as usize;
        let path = String::from_utf8(r.take(len)?.to_vec()).ok()?;
        let mode = match r.take(1)?[0] {
            0 => Mode::File,
            1 => Mode::Exec,
            2 => Mode::Link,
            _ => return None,
        };
        let stat = Stat {
            mode,
            size: u64::from_le_bytes(r.take(8)?.try_into().ok()?),
            mtime_ns: i128::from_le_bytes(r.take(16)?.try_into().ok()?),
            ctime_ns: i128::from_le_bytes(r.take(16)?.try_into().ok()?),
            ino: u64::from_le_bytes(r.take(8)?.try_into().ok()?),
            dev: u64::from_le_bytes(r.take(8)?.try_into().ok()?),
        };
        let id = ObjectId::try_from(r.take(20)?).ok()?;
        entries.insert(path, CacheEntry { stat, id });
    }
    let dir_count = u64::from_le_bytes(r.take(8)?.try_into().ok()?);
    let mut dirs = HashMap::with_capacity(dir_count.min(1 << 20) as usize);
    for _ in 0..dir_count {
        let len = u32::from_le_bytes(r.take(4)?.try_into().ok()?) as usize;
        let dir = String::from_utf8(r.take(len)?.to_vec()).ok()?;
        dirs.insert(dir, ObjectId::try_from(r.take(20)?).ok()?);
    }
    r.0.is_empty().then_some(StatCache {
        started_ns,
        tree,
        entries,
        dirs,
    })
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }
}
