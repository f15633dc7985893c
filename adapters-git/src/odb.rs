//! The store's object database: git loose objects (`objects/xx/yyyy…`, zlib-compressed `"<kind> <size>\0"`
//! + content), written and read with streaming so no file is ever held whole in memory.

use std::collections::{HashMap, VecDeque};
use std::fs::{self, File};
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use flate2::Compression;
use flate2::read::ZlibDecoder;
use flate2::write::ZlibEncoder;
use gix::ObjectId;

use crate::error::{GitError, GitResult};
use crate::pack;

/// Git's object kinds, as far as snapshots use them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// File content or a symlink's target.
    Blob,
    /// A directory.
    Tree,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Blob => "blob",
            Kind::Tree => "tree",
        }
    }
}

/// The object database under `<store>/objects`: loose objects and packs written by rewind (see `pack.rs`),
/// and whole packs hardlinked (or copied) from the user's repository when a first snapshot was seeded from
/// it.
#[derive(Clone)]
pub struct Odb {
    objects: PathBuf,
    /// The packs, opened on first need, with spare handles on them for lookups on several threads.
    packed: Arc<Mutex<Packs>>,
    /// The objects written since `begin_batch`, held until `end_batch` writes them as one pack.
    batch: Arc<Mutex<Batch>>,
}

/// The packs of an `Odb`. A lookup runs on a handle of its own, taken from `spare` (or cloned from `opened`)
/// and given back after: a handle is not shared between threads (gix's caches in it are not), and one lookup,
/// its inflating included, must not hold up the others (a revert writes files on many threads, each reading
/// its blob first).
#[derive(Default)]
struct Packs {
    /// `None` until looked at, then the handle if there are packs.
    opened: Option<Option<gix::odb::Handle>>,
    /// Handles on `opened`'s packs, free for a lookup.
    spare: Vec<gix::odb::Handle>,
    /// Counts `packs_changed`: a handle taken before one is not given back.
    generation: u64,
}

/// At most this many spare handles are kept (one per thread that looked an object up at once).
const SPARE_HANDLES: usize = 32;

/// Objects held for one pack.
#[derive(Default)]
struct Batch {
    on: bool,
    entries: Vec<pack::Entry>,
    ids: HashMap<ObjectId, usize>,
    bytes: usize,
}

impl Batch {
    fn get(&self, id: &ObjectId) -> Option<&pack::Entry> {
        self.ids.get(id).map(|&at| &self.entries[at])
    }
}

/// A batch is written as a pack once it holds this many compressed bytes (memory stays bounded on a
/// first track of a big worktree).
const BATCH_BYTES: usize = 16 * 1024 * 1024;
/// Fewer objects than this are written loose: a pack is two files.
const PACK_FROM: usize = 3;

impl std::fmt::Debug for Odb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Odb")
            .field("objects", &self.objects)
            .finish_non_exhaustive()
    }
}

/// Hashes a git object as it is streamed.
struct ObjectHasher(gix::hash::Hasher);

impl ObjectHasher {
    fn new(kind: Kind, size: u64) -> Self {
        let mut hasher = gix::hash::hasher(gix::hash::Kind::Sha1);
        hasher.update(format!("{} {size}\0", kind.name()).as_bytes());
        ObjectHasher(hasher)
    }

    fn finish(self) -> GitResult<ObjectId> {
        self.0
            .try_finalize()
            .map_err(|e| GitError::Other(format!("hashing failed: {e}")))
    }
}

/// A worktree file that was no longer a regular file when it was opened to be read (a FIFO, device or
/// socket put in its place since it was looked at).
#[derive(Debug)]
struct NotRegular;

impl std::fmt::Display for NotRegular {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("it stopped being a regular file while it was being read")
    }
}

impl std::error::Error for NotRegular {}

/// Opens a worktree file to read its content, only while it is a regular file: never through a symlink
/// put in its place since it was looked at (`O_NOFOLLOW`, which fails with `ELOOP`: the content of a file
/// outside the worktree must not be stored as this one's), and never waiting on a FIFO put there
/// (`O_NONBLOCK`, then `fstat`). `replaced_meanwhile` tells these failures apart.
pub fn open_regular(path: &Path) -> io::Result<File> {
    use rustix::fs::OFlags;
    opened_regular(|flags| {
        rustix::fs::open(path, flags | OFlags::NOFOLLOW, rustix::fs::Mode::empty())
    })
}

/// `open_regular`, following a symlink at `path` (git follows one for `HEAD`, and for attribute files
/// outside the worktree).
pub fn open_regular_following(path: &Path) -> io::Result<File> {
    opened_regular(|flags| rustix::fs::open(path, flags, rustix::fs::Mode::empty()))
}

/// The whole content of a small regular file at `path` (`open_regular`, or `open_regular_following`
/// with `follow`): a FIFO put there is never waited on.
pub fn read_regular(path: &Path, follow: bool) -> io::Result<Vec<u8>> {
    let mut file = if follow {
        open_regular_following(path)?
    } else {
        open_regular(path)?
    };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// How long an open waits for another holder's lease on the file to be given up: longer than the
/// kernel's own `lease-break-time` (45 s by default), after which it breaks the lease itself.
const LEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// The file `open` opens (given `O_RDONLY | O_NONBLOCK | O_CLOEXEC`), when it is a regular file. An open
/// that meets another holder's lease (Samba's oplocks, an NFS server's delegations, `F_SETLEASE`: `EAGAIN`
/// with `O_NONBLOCK`) has started that lease's break, and is made again, still without waiting, until
/// it is given up: never a blocking open, which would wait for good on a FIFO put there meanwhile.
pub(crate) fn opened_regular(
    open: impl Fn(rustix::fs::OFlags) -> rustix::io::Result<rustix::fd::OwnedFd>,
) -> io::Result<File> {
    use rustix::fs::OFlags;
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let started = std::time::Instant::now();
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        match open(flags) {
            Err(rustix::io::Errno::AGAIN) if started.elapsed() < LEASE_WAIT => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(100));
            }
            opened => return regular(opened?),
        }
    }
}

/// The file `fd` when it is a regular file (`open_regular`).
fn regular(fd: rustix::fd::OwnedFd) -> io::Result<File> {
    use rustix::fs::FileType;
    let stat = rustix::fs::fstat(&fd)?;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => Ok(File::from(fd)),
        FileType::Directory => Err(io::Error::from(rustix::io::Errno::ISDIR)),
        _ => Err(io::Error::other(NotRegular)),
    }
}

/// Whether reading a worktree file failed because something else was put in its place after it was
/// looked at (a directory, a symlink, a special file: see `open_regular`), so that a look again tells
/// what stands there. A file deleted meanwhile is `NotFound`, and one below a directory replaced by a file
/// is `NotADirectory`: those are gone (`gone`), not replaced.
pub fn replaced_meanwhile(error: &io::Error) -> bool {
    let raw = error.raw_os_error();
    raw == Some(rustix::io::Errno::ISDIR.raw_os_error())
        || raw == Some(rustix::io::Errno::LOOP.raw_os_error())
        || error
            .get_ref()
            .is_some_and(|inner| inner.is::<NotRegular>())
}

/// Whether a worktree path is gone: deleted (`NotFound`), or a directory above it replaced by a file or
/// symlink (`NotADirectory`), so that nothing can stand at the path.
pub fn gone(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

/// Reads `source` to its end in 64 KiB chunks, handing each to `each`, and returns how many bytes it read;
/// it stops early once more than `limit` bytes have come (the file grew: the caller looks again).
fn read_chunks(
    mut source: impl Read,
    limit: u64,
    mut each: impl FnMut(&[u8]) -> io::Result<()>,
) -> io::Result<u64> {
    let mut buffer = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        let n = match source.read(&mut buffer) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        total += n as u64;
        if total > limit {
            return Ok(total);
        }
        each(&buffer[..n])?;
    }
}

/// How many bytes of tree objects a process keeps read (see `TREES`).
const TREE_CACHE_BYTES: usize = 16 * 1024 * 1024;

/// Tree objects this process has read or written, by id, oldest first out when full. An id names its
/// content, so what is kept is right for every store; whether a store still holds the object is asked
/// again at every read (one stat of a loose object), so a missing object stays an error. A revert reads
/// the same few trees of the same snapshots in each of its calls (plan, checks, `applied`, diffs), and the
/// next operation again; and it reads `base` along its paths, the trees the track it follows has just
/// written (kept as written: a revert of 1,000 files in a worktree of 100,000 read them back from the
/// track's pack, inflating each, about 4.5 ms of one core).
static TREES: LazyLock<Mutex<TreeCache>> = LazyLock::new(Mutex::default);

#[derive(Default)]
struct TreeCache {
    trees: HashMap<ObjectId, Arc<[u8]>>,
    order: VecDeque<ObjectId>,
    bytes: usize,
}

impl TreeCache {
    fn get(&self, id: &ObjectId) -> Option<Arc<[u8]>> {
        self.trees.get(id).cloned()
    }

    fn insert(&mut self, id: ObjectId, data: Arc<[u8]>) {
        if data.len() > TREE_CACHE_BYTES || self.trees.contains_key(&id) {
            return;
        }
        while self.bytes + data.len() > TREE_CACHE_BYTES {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(gone) = self.trees.remove(&oldest) {
                self.bytes -= gone.len();
            }
        }
        self.bytes += data.len();
        self.order.push_back(id);
        self.trees.insert(id, data);
    }
}

/// The pack handles this process opened, per objects directory, with the names in its pack directory
/// then. A pack's name is its checksum and pack files are never changed in place, so while the names are
/// the same the handle reads the same packs (its indexes stay mapped, instead of being mapped again by
/// every operation).
type PackHandles = HashMap<PathBuf, (Vec<std::ffi::OsString>, gix::odb::Handle)>;
static PACK_HANDLES: LazyLock<Mutex<PackHandles>> = LazyLock::new(Mutex::default);

/// A handle on the packs of `objects`, or `None` when it has none.
fn open_packs(objects: &Path) -> Option<gix::odb::Handle> {
    let pack_names = || {
        let mut names: Vec<std::ffi::OsString> = fs::read_dir(objects.join("pack"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        names.sort();
        names
    };
    let names = pack_names();
    if !names.iter().any(|n| n.to_string_lossy().ends_with(".idx")) {
        return None;
    }
    let mut handles = PACK_HANDLES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((known, handle)) = handles.get(objects)
        && *known == names
    {
        return Some(handle.clone());
    }
    let mut handle = gix::odb::at(objects, gix::hash::Kind::Sha1).ok()?;
    // A lookup that misses (every new object is looked up before it is written) must not list the pack
    // directory again, as gix does by default: the names decide when a new handle is needed.
    handle.refresh_never();
    // gix lists the directory at its first lookup: made now (a miss loads every index), and the handle is
    // kept only when the names are still those it was opened under.
    gix::objs::Exists::exists(&handle, &ObjectId::null(gix::hash::Kind::Sha1));
    if pack_names() == names {
        if handles.len() >= PACK_HANDLES_KEPT {
            // Stores not used for a while keep no packs mapped (deleted ones would hold their space).
            handles.clear();
        }
        handles.insert(objects.to_path_buf(), (names, handle.clone()));
    }
    Some(handle)
}

/// At most this many stores have their pack handle kept.
const PACK_HANDLES_KEPT: usize = 32;

fn tree_cache() -> std::sync::MutexGuard<'static, TreeCache> {
    TREES.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Files up to this size are read whole before they are stored; larger ones are streamed.
pub(crate) const IN_MEMORY_BLOB: u64 = 256 * 1024;

impl Odb {
    /// The database in `objects`.
    pub fn new(objects: PathBuf) -> Self {
        Odb {
            objects,
            packed: Default::default(),
            batch: Default::default(),
        }
    }

    fn batch(&self) -> std::sync::MutexGuard<'_, Batch> {
        self.batch.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// From now until `end_batch`, objects up to `IN_MEMORY_BLOB` are held and written together as one pack
    /// (or loose when they are few). Readers of this `Odb` find them meanwhile; nothing that names one may
    /// be stored before `end_batch` returns.
    pub fn begin_batch(&self) {
        self.batch().on = true;
    }

    /// Writes the objects held since `begin_batch` and stops holding them.
    pub fn end_batch(&self) -> GitResult<()> {
        let mut batch = self.batch();
        batch.on = false;
        self.write_batch(&mut batch)
    }

    /// Forgets the objects held since `begin_batch` (the operation failed; nothing names them).
    pub fn drop_batch(&self) {
        *self.batch() = Batch::default();
    }

    /// Runs `work` with a batch begun (see `begin_batch`); `work` ends it with `end_batch` before it stores
    /// anything that names a held object. When `work` fails, what the batch still holds is dropped.
    pub fn batched<T>(&self, work: impl FnOnce() -> GitResult<T>) -> GitResult<T> {
        self.begin_batch();
        let outcome = work();
        match outcome {
            // Ended by `work` already, as a rule (then this writes nothing).
            Ok(_) => self.end_batch()?,
            Err(_) => self.drop_batch(),
        }
        outcome
    }

    /// Writes what `batch` holds (the lock is held throughout, so no reader misses an object in between).
    fn write_batch(&self, batch: &mut Batch) -> GitResult<()> {
        let entries = std::mem::take(&mut batch.entries);
        batch.ids.clear();
        batch.bytes = 0;
        if entries.len() < PACK_FROM {
            for entry in entries {
                let mut data = Vec::with_capacity(entry.size as usize);
                ZlibDecoder::new(entry.compressed())
                    .read_to_end(&mut data)
                    .map_err(|e| GitError::Corrupt(format!("object {}: {e}", entry.id)))?;
                self.write_loose(entry.kind, &data, &entry.id)?;
            }
            return Ok(());
        }
        let dir = self.objects.join("pack");
        pack::write(&dir, &entries)?;
        // Merging is housekeeping: when it fails the packs stay as they are (each still readable, a damaged
        // one failing closed when read) and this batch is written all the same.
        let _merged = pack::merge_small(&dir);
        self.packs_changed();
        Ok(())
    }

    /// Where the loose object `id` lives.
    pub fn path_of(&self, id: &ObjectId) -> PathBuf {
        let hex = id.to_string();
        self.objects.join(&hex[..2]).join(&hex[2..])
    }

    /// The objects directory.
    pub fn dir(&self) -> &Path {
        &self.objects
    }

    /// Runs `f` with the store's packs, opened on first need (most stores have none).
    fn with_packs<T>(&self, f: impl FnOnce(&gix::odb::Handle) -> T) -> Option<T> {
        let (handle, generation) = {
            let mut packs = self.packs();
            let handle = match packs.spare.pop() {
                Some(spare) => spare,
                None => packs
                    .opened
                    .get_or_insert_with(|| open_packs(&self.objects))
                    .clone()?,
            };
            (handle, packs.generation)
        };
        let found = f(&handle);
        let mut packs = self.packs();
        if packs.generation == generation && packs.spare.len() < SPARE_HANDLES {
            packs.spare.push(handle);
        }
        Some(found)
    }

    fn packs(&self) -> std::sync::MutexGuard<'_, Packs> {
        self.packed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens the store's packs, when they are not open yet (the first lookup would).
    pub fn open_packs_now(&self) {
        self.with_packs(|_| ());
    }

    /// Forgets the opened packs, after packs were added or removed.
    pub fn packs_changed(&self) {
        let mut packs = self.packs();
        packs.opened = None;
        packs.spare.clear();
        packs.generation += 1;
    }

    /// True when the object is stored. The packs' indexes are asked before the loose objects' directory:
    /// they are in memory, and a seeded or collected store keeps most objects there (a missing loose
    /// object costs a path lookup in the kernel).
    pub fn contains(&self, id: &ObjectId) -> bool {
        let held = self.batch().get(id).is_some();
        held || self
            .with_packs(|packs| gix::objs::Exists::exists(packs, id))
            .unwrap_or(false)
            || self.path_of(id).is_file()
    }

    /// The id `data` has as an object of `kind`, without storing it.
    pub fn hash(kind: Kind, data: &[u8]) -> GitResult<ObjectId> {
        let mut hasher = ObjectHasher::new(kind, data.len() as u64);
        hasher.0.update(data);
        hasher.finish()
    }

    /// Stores an object held in memory (trees, symlink targets) and returns its id.
    pub fn write_buf(&self, kind: Kind, data: &[u8]) -> GitResult<ObjectId> {
        let id = Self::hash(kind, data)?;
        if kind == Kind::Tree {
            tree_cache().insert(id, Arc::from(data));
        }
        if self.contains(&id) {
            return Ok(id);
        }
        if data.len() as u64 <= IN_MEMORY_BLOB && self.batch().on {
            // Compressed before the batch is locked: the hashing threads compress in parallel.
            let entry =
                pack::Entry::new(id, kind, data).map_err(|e| GitError::io(&self.objects, e))?;
            let mut batch = self.batch();
            if batch.on {
                if !batch.ids.contains_key(&id) {
                    batch.bytes += entry.raw.len();
                    let at = batch.entries.len();
                    batch.ids.insert(id, at);
                    batch.entries.push(entry);
                }
                if batch.bytes >= BATCH_BYTES {
                    self.write_batch(&mut batch)?;
                }
                return Ok(id);
            }
        }
        self.write_loose(kind, data, &id)?;
        Ok(id)
    }

    /// Writes an object as a loose file (`id` is its id).
    fn write_loose(&self, kind: Kind, data: &[u8], id: &ObjectId) -> GitResult<()> {
        let (tmp, file) = self.temp_file()?;
        let result = (|| {
            let mut encoder = ZlibEncoder::new(io::BufWriter::new(file), Compression::fast());
            encoder.write_all(format!("{} {}\0", kind.name(), data.len()).as_bytes())?;
            encoder.write_all(data)?;
            encoder.finish()?.flush()
        })();
        self.commit_temp(tmp, id, result)
    }

    /// The blob id of a regular file's content, read in a stream and not stored. `Ok(None)` when the
    /// file's size changed while it was read (the caller looks again).
    pub fn hash_file_blob(path: &Path, expected_size: u64) -> io::Result<Option<ObjectId>> {
        Odb::hash_blob_of(open_regular(path)?, expected_size)
    }

    /// `hash_file_blob` of a file already open (`beneath::Root::file_for_reading`).
    pub fn hash_blob_of(source: File, expected_size: u64) -> io::Result<Option<ObjectId>> {
        let mut hasher = ObjectHasher::new(Kind::Blob, expected_size);
        let read = read_chunks(source, expected_size, |chunk| {
            hasher.0.update(chunk);
            Ok(())
        })?;
        if read != expected_size {
            return Ok(None);
        }
        hasher
            .finish()
            .map(Some)
            .map_err(|e| io::Error::other(e.to_string()))
    }

    /// Stores the content of a regular file, already open (`open_regular`, `beneath::Root::file_for_reading`),
    /// as a blob, reading it once in a stream: hashed and compressed together. `Ok(None)` when the file's
    /// size changed while it was read (the caller retries).
    pub fn write_blob_of(&self, source: File, expected_size: u64) -> io::Result<Option<ObjectId>> {
        if expected_size <= IN_MEMORY_BLOB {
            // A small file is read whole, hashed, and written only when the store lacks it: re-hashing a
            // file whose content is already stored (a racy entry, a file a revert just wrote) then creates
            // no temporary object file.
            let mut data = Vec::with_capacity(expected_size as usize);
            // `read_to_end` retries interrupted reads itself.
            source.take(expected_size + 1).read_to_end(&mut data)?;
            if data.len() as u64 != expected_size {
                return Ok(None);
            }
            return self.write_buf(Kind::Blob, &data).map(Some).map_err(as_io);
        }
        let (tmp, file) = self.temp_file().map_err(as_io)?;
        let mut hasher = ObjectHasher::new(Kind::Blob, expected_size);
        let outcome = (|| -> io::Result<u64> {
            let mut encoder = ZlibEncoder::new(io::BufWriter::new(file), Compression::fast());
            encoder.write_all(format!("blob {expected_size}\0").as_bytes())?;
            let total = read_chunks(source, expected_size, |chunk| {
                hasher.0.update(chunk);
                encoder.write_all(chunk)
            })?;
            encoder.finish()?.flush()?;
            Ok(total)
        })();
        let read = match outcome {
            Ok(read) => read,
            Err(error) => {
                let _ = fs::remove_file(&tmp);
                return Err(error);
            }
        };
        if read != expected_size {
            let _ = fs::remove_file(&tmp);
            return Ok(None);
        }
        let id = hasher.finish().map_err(as_io)?;
        self.commit_temp(tmp, &id, Ok(())).map_err(as_io)?;
        Ok(Some(id))
    }

    /// Writes `data`, the object `id` of `kind` (already checked to hash to it), as a loose object, synced
    /// with its directory before it returns (a copy already there too): for a big object whose pack is
    /// deleted next (own packs hold only objects up to `IN_MEMORY_BLOB`; a loose one is read streamed).
    pub fn write_loose_durable(&self, id: &ObjectId, kind: Kind, data: &[u8]) -> GitResult<()> {
        self.write_loose(kind, data, id)?;
        let target = self.path_of(id);
        let synced = File::open(&target).and_then(|file| file.sync_all());
        synced.map_err(|e| GitError::io(&target, e))?;
        if let Some(dir) = target.parent() {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| GitError::io(dir, e))?;
        }
        Ok(())
    }

    fn temp_file(&self) -> GitResult<(PathBuf, File)> {
        fs::create_dir_all(&self.objects).map_err(|e| GitError::io(&self.objects, e))?;
        for attempt in 0..16u32 {
            let name = format!("tmp_obj_{}_{}_{attempt}", std::process::id(), rand_suffix());
            let path = self.objects.join(name);
            match File::options().write(true).create_new(true).open(&path) {
                Ok(file) => return Ok((path, file)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(GitError::io(&path, e)),
            }
        }
        Err(GitError::Other(
            "could not create a temporary object file".to_owned(),
        ))
    }

    fn commit_temp(&self, tmp: PathBuf, id: &ObjectId, written: io::Result<()>) -> GitResult<()> {
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(GitError::io(&tmp, e));
        }
        let target = self.path_of(id);
        if target.is_file() {
            let _ = fs::remove_file(&tmp);
            return Ok(());
        }
        if let Some(dir) = target.parent() {
            fs::create_dir_all(dir).map_err(|e| GitError::io(dir, e))?;
        }
        fs::rename(&tmp, &target).map_err(|e| GitError::io(&target, e))
    }

    /// Reads stored object `id` whole and checks that its content hashes to `id`: a stored object that
    /// cannot be read, or holds other bytes (a damaged pack or loose file, the user's adopted by a seeded
    /// snapshot included, whose header alone was checked then), is `Corrupt`; one not stored, `Missing`.
    pub fn verify(&self, id: &ObjectId) -> GitResult<()> {
        let (kind, size, reader) = self.open(id)?;
        let mut hasher = ObjectHasher::new(kind, size);
        let read = read_chunks(reader, size, |chunk| {
            hasher.0.update(chunk);
            Ok(())
        })
        .map_err(|e| GitError::Corrupt(format!("object {id}: {e}")))?;
        if read != size || hasher.finish()? != *id {
            return Err(GitError::Corrupt(format!(
                "object {id} does not hold the content its id names"
            )));
        }
        Ok(())
    }

    /// Opens a stored object: its kind, its size and a reader of its content.
    pub fn open(&self, id: &ObjectId) -> GitResult<(Kind, u64, Box<dyn Read + Send>)> {
        self.open_with(id, true)
    }

    /// `open`, with a small loose copy looked for before the packs (`open_loose_small`) or after them
    /// (trees: nearly all packed, read one after another, and each missed look is a path walk).
    fn open_with(
        &self,
        id: &ObjectId,
        loose_first: bool,
    ) -> GitResult<(Kind, u64, Box<dyn Read + Send>)> {
        let held = self
            .batch()
            .get(id)
            .map(|e| (e.kind, e.size, e.compressed().to_vec()));
        if let Some((kind, size, compressed)) = held {
            let reader = ZlibDecoder::new(io::Cursor::new(compressed));
            return Ok((kind, size, Box::new(reader.take(size))));
        }
        if loose_first && let Some(found) = self.open_loose_small(id) {
            return Ok(found);
        }
        let pack_error = match self.open_packed(id) {
            Ok(found) => return Ok(found),
            Err(GitError::Missing(_)) => None,
            Err(error) => Some(error),
        };
        let file = self.open_loose(id, pack_error)?;
        let mut decoder = BufReader::new(ZlibDecoder::new(BufReader::new(file)));
        let (kind, size) = read_loose_header(&mut decoder, id)?;
        Ok((kind, size, Box::new(decoder.take(size))))
    }

    /// A loose copy of `id` of at most `IN_MEMORY_BLOB` bytes, read whole and checked (zlib's checksum, and
    /// the size its header says), before the packs are asked. gix finds a loose object only after every
    /// pack's index missed, and maps the file to read it: each unmap then interrupts every core running a
    /// thread of the process (a TLB shootdown), and a revert writes with many threads. In a store seeded
    /// from a freshly committed repository (100,000 loose objects) that was 39 % of the writes' samples.
    /// None when there is no such copy, or it is bigger, or damaged: the packs are asked, then a loose copy
    /// is streamed as before (so a damaged loose copy still gives way to a packed one).
    fn open_loose_small(&self, id: &ObjectId) -> Option<(Kind, u64, Box<dyn Read + Send>)> {
        let file = File::open(self.path_of(id)).ok()?;
        let mut decoder = ZlibDecoder::new(BufReader::new(file));
        let (kind, size) = read_loose_header(&mut decoder, id).ok()?;
        if size > IN_MEMORY_BLOB {
            return None;
        }
        let mut data = Vec::with_capacity(size as usize);
        decoder.read_to_end(&mut data).ok()?;
        (data.len() as u64 == size).then(|| {
            let reader: Box<dyn Read + Send> = Box::new(io::Cursor::new(data));
            (kind, size, reader)
        })
    }

    /// The loose file of `id`, looked for after the packs (`pack_error`: what they gave instead of the
    /// object, if anything but "not there"). Absent, the answer is the packs' error, or `Missing`.
    fn open_loose(&self, id: &ObjectId, pack_error: Option<GitError>) -> GitResult<File> {
        let path = self.path_of(id);
        File::open(&path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => {
                pack_error.unwrap_or_else(|| GitError::Missing(id.to_string()))
            }
            _ => GitError::io(&path, e),
        })
    }

    /// Reads an object from a pack (whole, in memory: packs hold seeded, committed content, and rewind's
    /// own packs only objects up to `IN_MEMORY_BLOB`).
    fn open_packed(&self, id: &ObjectId) -> GitResult<(Kind, u64, Box<dyn Read + Send>)> {
        let found = self.with_packs(|packs| {
            let mut buffer = Vec::new();
            gix::objs::Find::try_find(packs, id, &mut buffer)
                .map(|data| data.map(|data| (data.kind, data.data.to_vec())))
                .map_err(|e| GitError::Corrupt(format!("object {id}: {e}")))
        });
        let (kind, bytes) = found
            .transpose()?
            .flatten()
            .ok_or_else(|| GitError::Missing(id.to_string()))?;
        Ok((
            packed_kind(kind, id)?,
            bytes.len() as u64,
            Box::new(io::Cursor::new(bytes)),
        ))
    }

    /// A stored object's kind and size, without reading its content (a packed one's read from the pack,
    /// a loose object's header inflated). The packs come first, as in `contains`; an object a pack cannot
    /// give (damaged there) is still found loose.
    pub fn header(&self, id: &ObjectId) -> GitResult<(Kind, u64)> {
        let held = self.batch().get(id).map(|e| (e.kind, e.size));
        if let Some(held) = held {
            return Ok(held);
        }
        let packed = self
            .with_packs(|packs| {
                gix::objs::FindHeader::try_header(packs, id)
                    .map_err(|e| GitError::Corrupt(format!("object {id}: {e}")))
            })
            .transpose()
            .map(Option::flatten);
        let pack_error = match packed {
            Ok(Some(found)) => return Ok((packed_kind(found.kind, id)?, found.size)),
            Ok(None) => None,
            Err(error) => Some(error),
        };
        loose_header(self.open_loose(id, pack_error)?, id)
    }

    /// Reads a tree object, from the trees this process has read when the store still holds it.
    pub fn read_tree(&self, id: &ObjectId) -> GitResult<Arc<[u8]>> {
        // The empty tree is read as git reads it, whether the store holds it or not: a snapshot of
        // nothing, which every snapshot can be compared with.
        if id.is_empty_tree() {
            return Ok(Arc::from(Vec::new()));
        }
        let known = tree_cache().get(id);
        if let Some(data) = known
            && self.contains(id)
        {
            return Ok(data);
        }
        let data = self.read_tree_stored(id)?;
        tree_cache().insert(*id, data.clone());
        Ok(data)
    }

    /// `read_tree` from the store itself, never from the trees kept in memory: gc must find a tree its
    /// store cannot give back (damaged on disk since this process wrote or read it), and then delete
    /// nothing.
    pub fn read_tree_stored(&self, id: &ObjectId) -> GitResult<Arc<[u8]>> {
        if id.is_empty_tree() {
            return Ok(Arc::from(Vec::new()));
        }
        Ok(self.read(id, Kind::Tree)?.into())
    }

    /// Reads a whole object of the expected kind (trees, and blobs known to be small).
    pub fn read(&self, id: &ObjectId, expected: Kind) -> GitResult<Vec<u8>> {
        let (kind, size, mut reader) = self.open_with(id, expected != Kind::Tree)?;
        if kind != expected {
            return Err(GitError::Corrupt(format!(
                "object {id} is a {kind:?}, expected a {expected:?}"
            )));
        }
        let mut data = Vec::with_capacity(size as usize);
        reader
            .read_to_end(&mut data)
            .map_err(|e| GitError::Corrupt(format!("object {id}: {e}")))?;
        if data.len() as u64 != size {
            return Err(GitError::Corrupt(format!("object {id} is truncated")));
        }
        Ok(data)
    }
}

/// A short random suffix for temporary names.
pub fn rand_suffix() -> String {
    format!("{:016x}", random_u64())
}

/// A random number (from std's randomly keyed hasher, fed the time and the process id).
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// How many compressed bytes of a loose object are read at most to find its header.
const LOOSE_HEADER_READ_MAX: usize = 4096;

/// A loose object's kind and size from the first bytes of its file, inflated on the stack (a header is at
/// most a few dozen bytes).
fn loose_header(mut file: File, id: &ObjectId) -> GitResult<(Kind, u64)> {
    let corrupt = |why: &str| GitError::Corrupt(format!("object {id}: {why}"));
    // The compressed bytes are read a little at a time until the header is out: a stream that begins with
    // a block of its own Huffman codes (as git's zlib writes for text of a few KB) gives no output before
    // that table, which can take a few hundred bytes.
    let mut header = [0u8; 48];
    let mut out = 0;
    let mut inflate = flate2::Decompress::new(true);
    let mut compressed = [0u8; 256];
    let mut consumed = 0usize;
    let end = loop {
        if let Some(end) = header[..out].iter().position(|&b| b == 0) {
            break end;
        }
        if out == header.len() || consumed >= LOOSE_HEADER_READ_MAX {
            return Err(corrupt("no header in its first bytes"));
        }
        let read = match file.read(&mut compressed) {
            Ok(0) => return Err(corrupt("no header in its first bytes")),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(corrupt(&e.to_string())),
        };
        consumed += read;
        // All of `read` is taken unless the header buffer fills first (then the header is too long).
        let _ = inflate
            .decompress(
                &compressed[..read],
                &mut header[out..],
                flate2::FlushDecompress::Sync,
            )
            .map_err(|e| corrupt(&e.to_string()))?;
        out = usize::try_from(inflate.total_out())
            .unwrap_or(usize::MAX)
            .min(header.len());
    };
    header_fields(&header[..end], id)
}

/// The kind and size of a loose object's header text (`blob 12`, without its NUL).
/// Reads a loose object's header (`<kind> <size>\0`) from its inflated stream.
fn read_loose_header(decoder: &mut impl Read, id: &ObjectId) -> GitResult<(Kind, u64)> {
    let mut header = Vec::with_capacity(32);
    loop {
        let mut byte = [0u8; 1];
        decoder
            .read_exact(&mut byte)
            .map_err(|e| GitError::Corrupt(format!("object {id}: {e}")))?;
        if byte[0] == 0 {
            break;
        }
        header.push(byte[0]);
        if header.len() > 32 {
            return Err(GitError::Corrupt(format!("object {id}: header too long")));
        }
    }
    header_fields(&header, id)
}

fn header_fields(header: &[u8], id: &ObjectId) -> GitResult<(Kind, u64)> {
    let corrupt = |why: String| GitError::Corrupt(format!("object {id}: {why}"));
    let text = std::str::from_utf8(header).map_err(|_| corrupt("bad header".to_owned()))?;
    let (kind, size) = text
        .split_once(' ')
        .ok_or_else(|| corrupt(format!("bad header {text:?}")))?;
    let kind = match kind {
        "blob" => Kind::Blob,
        "tree" => Kind::Tree,
        other => return Err(corrupt(format!("unexpected kind {other}"))),
    };
    let size = size
        .parse()
        .map_err(|_| corrupt(format!("bad size {size:?}")))?;
    Ok((kind, size))
}

/// The kind of an object a pack holds: a blob or a tree, anything else is not rewind's.
fn packed_kind(kind: gix::objs::Kind, id: &ObjectId) -> GitResult<Kind> {
    match kind {
        gix::objs::Kind::Blob => Ok(Kind::Blob),
        gix::objs::Kind::Tree => Ok(Kind::Tree),
        other => Err(GitError::Corrupt(format!(
            "object {id}: unexpected kind {other}"
        ))),
    }
}

/// A store error as an IO error that keeps the system's kind of an IO failure under it, so a full disk
/// met while a file is stored is still told from a file that cannot be read (`is_write_failure`; diff
/// review: the store's own write errors lost their kind here, and a full data directory was reported as
/// an unreadable worktree file).
fn as_io(error: GitError) -> io::Error {
    match &error {
        GitError::Io { source, .. } | GitError::StoreWrite { source, .. } => {
            io::Error::new(source.kind(), error.to_string())
        }
        _ => io::Error::other(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store's own write failure keeps its kind through `as_io`: a full disk is still a write failure,
    /// not a file that cannot be read; any other store error is neither.
    #[test]
    fn a_store_write_failure_keeps_its_kind() {
        let os = io::Error::from_raw_os_error;
        let full = as_io(GitError::io(Path::new("/data/objects/ab"), os(28)));
        assert!(crate::error::is_write_failure(&full), "{full:?}");
        assert!(full.to_string().contains("/data/objects/ab"), "{full}");
        let store = as_io(GitError::StoreWrite {
            store: "/data".to_owned(),
            source: os(122),
        });
        assert!(crate::error::is_write_failure(&store), "{store:?}");
        let other = as_io(GitError::Corrupt("x".to_owned()));
        assert!(!crate::error::is_write_failure(&other), "{other:?}");
    }

    /// The pack handle kept for a store follows its pack directory: a pack written, rewritten or removed by
    /// any `Odb` (or another process) is seen by the next `Odb` of the same directory.
    #[test]
    fn the_kept_pack_handle_follows_the_pack_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let objects = dir.path().join("objects");
        let pack_dir = objects.join("pack");
        let blobs: Vec<pack::Entry> = (0..4)
            .map(|i| {
                let data = format!("handle {i}");
                let id = Odb::hash(Kind::Blob, data.as_bytes()).expect("hash");
                pack::Entry::new(id, Kind::Blob, data.as_bytes()).expect("entry")
            })
            .collect();
        pack::write(&pack_dir, &blobs[..2]).expect("first pack");
        assert!(Odb::new(objects.clone()).contains(&blobs[0].id));
        assert!(!Odb::new(objects.clone()).contains(&blobs[2].id));
        pack::write(&pack_dir, &blobs[2..]).expect("second pack");
        assert!(
            Odb::new(objects.clone()).contains(&blobs[2].id),
            "a new pack is seen"
        );
        let gone = blobs[0].id;
        pack::rewrite(&pack_dir, &pack::own_packs(&pack_dir), |id| *id != gone).expect("prune");
        let odb = Odb::new(objects);
        assert!(!odb.contains(&gone), "a pruned object is gone");
        assert!(matches!(odb.open(&gone), Err(GitError::Missing(_))));
        for blob in &blobs[1..] {
            assert!(odb.contains(&blob.id));
        }
    }

    /// One `Odb` is read on several threads at once (each lookup on a handle of its own), and a pack
    /// written with the same `Odb` afterwards is seen by the next lookup: the handles kept from before it
    /// are not used again.
    #[test]
    fn lookups_on_several_threads_and_a_pack_written_after_them() {
        let (_dir, odb, ids) = five_packed_blobs();
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..50 {
                        for (i, id) in ids.iter().enumerate() {
                            assert_eq!(
                                odb.read(id, Kind::Blob).expect("read"),
                                format!("packed blob {i}").as_bytes()
                            );
                        }
                    }
                });
            }
        });
        assert!(
            !odb.packs().spare.is_empty(),
            "handles kept for the next lookups"
        );
        let later = write_five(&odb, "later blob");
        read_five_packed(&odb, &later, "later blob");
    }

    /// Objects held by a batch are found by every reader of the same `Odb` before they are written; a
    /// dropped batch leaves nothing, a small one is written loose and a bigger one as one pack.
    #[test]
    fn a_batch_is_read_while_held_and_written_when_it_ends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let odb = Odb::new(dir.path().join("objects"));
        let pack_files = || {
            fs::read_dir(dir.path().join("objects").join("pack"))
                .map(|entries| entries.count())
                .unwrap_or(0)
        };
        odb.begin_batch();
        let dropped = odb.write_buf(Kind::Blob, b"dropped").expect("held");
        assert!(odb.contains(&dropped));
        odb.drop_batch();
        assert!(!odb.contains(&dropped));
        odb.begin_batch();
        let small = odb.write_buf(Kind::Blob, b"one of two").expect("held");
        odb.write_buf(Kind::Tree, &[]).expect("held");
        assert_eq!(odb.header(&small).expect("header"), (Kind::Blob, 10));
        assert_eq!(odb.read(&small, Kind::Blob).expect("read"), b"one of two");
        assert!(!odb.path_of(&small).exists(), "held, not written");
        odb.end_batch().expect("written");
        assert!(
            odb.path_of(&small).is_file(),
            "two objects are written loose"
        );
        assert_eq!(pack_files(), 0);
        let many = write_five(&odb, "blob");
        assert_eq!(pack_files(), 2, "a pack and its index");
        read_five_packed(&odb, &many, "blob");
        // After the batch, objects are written loose again.
        let after = odb.write_buf(Kind::Blob, b"after").expect("written");
        assert!(odb.path_of(&after).is_file());
    }

    /// Writes the five blobs `PREFIX 0` .. `PREFIX 4` in one batch (so as one pack).
    fn write_five(odb: &Odb, prefix: &str) -> Vec<ObjectId> {
        odb.begin_batch();
        let ids = (0..5)
            .map(|i| {
                odb.write_buf(Kind::Blob, format!("{prefix} {i}").as_bytes())
                    .expect("held")
            })
            .collect();
        odb.end_batch().expect("written as a pack");
        ids
    }

    /// Checks that `write_five(odb, prefix)`'s blobs `ids` are packed (no loose copy) and read back.
    fn read_five_packed(odb: &Odb, ids: &[ObjectId], prefix: &str) {
        for (i, id) in ids.iter().enumerate() {
            assert!(!odb.path_of(id).exists(), "packed, not loose");
            assert_eq!(
                odb.read(id, Kind::Blob).expect("read from the pack"),
                format!("{prefix} {i}").as_bytes()
            );
        }
    }

    /// Zeroes every entry of each pack in `objects` (header and checksum kept), and tells `odb`.
    fn damage_packs(objects: &Path, odb: &Odb) {
        for entry in fs::read_dir(objects.join("pack")).expect("the packs") {
            let path = entry.expect("an entry").path();
            if path.extension().is_some_and(|e| e == "pack") {
                let mut bytes = fs::read(&path).expect("read the pack");
                let end = bytes.len() - 20;
                bytes[12..end].fill(0);
                let mut permissions = fs::metadata(&path).expect("stat").permissions();
                std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o644);
                fs::set_permissions(&path, permissions).expect("writable");
                fs::write(&path, bytes).expect("damage it");
            }
        }
        odb.packs_changed();
    }

    /// A store whose five blobs `packed blob 0` .. `4` are in one pack.
    fn five_packed_blobs() -> (tempfile::TempDir, Odb, Vec<ObjectId>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let odb = Odb::new(dir.path().join("objects"));
        let ids = write_five(&odb, "packed blob");
        (dir, odb, ids)
    }

    /// An object a damaged pack cannot give is still read, and its header found, from its loose copy; one
    /// stored only in that pack is `Corrupt`, never `Missing`.
    #[test]
    fn an_object_a_damaged_pack_cannot_give_is_read_loose() {
        let (dir, odb, ids) = five_packed_blobs();
        assert_eq!(
            odb.header(&ids[0]).expect("from the pack"),
            (Kind::Blob, 13)
        );
        // The first one is also stored loose (as another store would have written it).
        let other = Odb::new(dir.path().join("other"));
        other
            .write_buf(Kind::Blob, b"packed blob 0")
            .expect("written loose");
        let loose = odb.path_of(&ids[0]);
        fs::create_dir_all(loose.parent().expect("a fan-out directory")).expect("mkdir");
        fs::copy(other.path_of(&ids[0]), &loose).expect("copied");
        damage_packs(&dir.path().join("objects"), &odb);
        assert_eq!(
            odb.header(&ids[0]).expect("from the loose copy"),
            (Kind::Blob, 13)
        );
        assert_eq!(
            odb.read(&ids[0], Kind::Blob).expect("read"),
            b"packed blob 0"
        );
        assert!(odb.contains(&ids[0]));
        assert!(matches!(odb.header(&ids[1]), Err(GitError::Corrupt(_))));
        assert!(matches!(
            odb.read(&ids[1], Kind::Blob),
            Err(GitError::Corrupt(_))
        ));
    }

    /// A tree is read from its pack before any loose copy is looked for (a blob, from a small loose copy
    /// first): a loose file at the tree's name holding other content, which a read takes as it is (only
    /// zlib's checksum and the size are checked there), is not what a tree read gives while the pack can
    /// give the tree; once the pack is damaged, the loose copy is what is left, and is read.
    #[test]
    fn a_tree_is_read_from_its_pack_before_a_loose_copy() {
        let dir = tempfile::tempdir().expect("tempdir");
        let odb = Odb::new(dir.path().join("objects"));
        odb.begin_batch();
        let tree = odb.write_buf(Kind::Tree, b"the packed tree").expect("held");
        let blob = odb.write_buf(Kind::Blob, b"the packed blob").expect("held");
        // A batch of fewer than three objects is written loose.
        odb.write_buf(Kind::Blob, b"a third").expect("held");
        odb.end_batch().expect("written as a pack");
        assert!(!odb.path_of(&tree).exists(), "packed");
        let other = Odb::new(dir.path().join("other"));
        for (id, kind, content) in [
            (tree, Kind::Tree, &b"another tree"[..]),
            (blob, Kind::Blob, &b"another blob"[..]),
        ] {
            let elsewhere = other.write_buf(kind, content).expect("written loose");
            let loose = odb.path_of(&id);
            fs::create_dir_all(loose.parent().expect("a fan-out directory")).expect("mkdir");
            fs::copy(other.path_of(&elsewhere), &loose).expect("copied");
        }
        assert_eq!(
            &*odb.read(&tree, Kind::Tree).expect("read"),
            b"the packed tree"
        );
        assert_eq!(
            &*odb.read(&blob, Kind::Blob).expect("read"),
            b"another blob"
        );
        damage_packs(&dir.path().join("objects"), &odb);
        assert_eq!(
            &*odb.read(&tree, Kind::Tree).expect("read"),
            b"another tree"
        );
    }

    /// A small loose copy is read before the packs, whole and checked: a damaged one (its zlib checksum or
    /// its length wrong) gives way to the packed copy, and is never returned.
    #[test]
    fn a_damaged_loose_copy_gives_way_to_the_packed_one() {
        let (dir, odb, ids) = five_packed_blobs();
        let other = Odb::new(dir.path().join("other"));
        for id in &ids[..2] {
            let content = odb.read(id, Kind::Blob).expect("from the pack");
            other
                .write_buf(Kind::Blob, &content)
                .expect("written loose");
            let loose = odb.path_of(id);
            fs::create_dir_all(loose.parent().expect("a fan-out directory")).expect("mkdir");
            fs::copy(other.path_of(id), &loose).expect("copied");
        }
        // The first loose copy, intact, is what is read; the second has a byte of its body changed.
        assert!(odb.open_loose_small(&ids[0]).is_some());
        let damaged = odb.path_of(&ids[1]);
        let mut bytes = fs::read(&damaged).expect("read the loose copy");
        let at = bytes.len() - 6;
        bytes[at] ^= 0x55;
        fs::write(&damaged, &bytes).expect("damage it");
        assert!(odb.open_loose_small(&ids[1]).is_none(), "not returned");
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(
                odb.read(id, Kind::Blob).expect("read"),
                format!("packed blob {i}").as_bytes(),
            );
        }
    }

    /// `header` gives the kind and size `open` gives, for loose objects of every size (a header read from
    /// the first bytes only) and for an object that is not stored (`Missing`); a damaged one is `Corrupt`.
    #[test]
    fn header_is_what_open_reads() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let odb = Odb::new(dir.path().join("objects"));
        let mut ids = Vec::new();
        for size in [0usize, 5, 100, 70_000] {
            let data: Vec<u8> = (0..size).map(|i| (i * 13 % 251) as u8).collect();
            ids.push(odb.write_buf(Kind::Blob, &data).expect("stored"));
        }
        ids.push(odb.write_buf(Kind::Tree, &[]).expect("stored"));
        for id in &ids {
            let (kind, size, _) = odb.open(id).expect("opens");
            assert_eq!(odb.header(id).expect("a header"), (kind, size), "{id}");
        }
        let absent = Odb::hash(Kind::Blob, b"not stored").expect("hash");
        assert!(matches!(odb.header(&absent), Err(GitError::Missing(_))));
        let damaged = odb.path_of(&ids[1]);
        let mut permissions = fs::metadata(&damaged).expect("stat").permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o644);
        fs::set_permissions(&damaged, permissions).expect("writable");
        fs::write(&damaged, b"not zlib").expect("damage it");
        assert!(matches!(odb.header(&ids[1]), Err(GitError::Corrupt(_))));
    }

    /// `header` reads the header of loose objects git wrote, whatever their compression begins with: text
    /// of a few KB, which git's zlib compresses with a table of its own codes first (more than 64 bytes
    /// before the first output byte), and other sizes and kinds of content. The kind and size are git's
    /// (`git cat-file -t`/`-s`).
    #[test]
    fn header_reads_loose_objects_git_wrote() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let repo = dir.path().join("repo");
        let git = |args: &[&str], input: Option<&[u8]>| -> String {
            use std::io::Write;
            let mut child = std::process::Command::new("git")
                .arg("--git-dir")
                .arg(&repo)
                .args(args)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("git runs");
            if let Some(input) = input {
                child
                    .stdin
                    .take()
                    .expect("stdin")
                    .write_all(input)
                    .expect("written to git");
            }
            let output = child.wait_with_output().expect("git ends");
            assert!(output.status.success(), "git {args:?}");
            String::from_utf8(output.stdout)
                .expect("utf-8")
                .trim()
                .to_owned()
        };
        git(&["init", "--bare", "-q"], None);
        let words = [
            "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta",
        ];
        let text = |lines: usize| -> Vec<u8> {
            (0..lines)
                .map(|i| {
                    format!(
                        "{} {} line {i}: {}\n",
                        words[i % 8],
                        words[(i * 5 + 3) % 8],
                        i * 37
                    )
                })
                .collect::<String>()
                .into_bytes()
        };
        let binary: Vec<u8> = (0..3000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for content in [text(100), text(10), text(3000), binary, Vec::new()] {
            let id = git(&["hash-object", "-w", "--stdin"], Some(&content));
            let id = ObjectId::from_hex(id.as_bytes()).expect("an id");
            let odb = Odb::new(repo.join("objects"));
            let size: u64 = git(&["cat-file", "-s", &id.to_string()], None)
                .parse()
                .expect("a size");
            assert_eq!(git(&["cat-file", "-t", &id.to_string()], None), "blob");
            assert_eq!(
                odb.header(&id).expect("a header"),
                (Kind::Blob, size),
                "{id}"
            );
        }
    }

    /// A file hashed in a stream has the id `git hash-object` gives it (several chunks, and an empty
    /// file), and one whose size is not what the caller saw gives `None`.
    #[test]
    fn hash_file_blob_is_git_hash_object() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        for (name, size) in [("big", 200 * 1024 + 17), ("empty", 0), ("small", 5)] {
            let path = dir.path().join(name);
            let data: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
            fs::write(&path, &data).expect("write");
            let ours = Odb::hash_file_blob(&path, size as u64)
                .expect("read")
                .expect("the size is right");
            let git = std::process::Command::new("git")
                .args(["hash-object", "--no-filters"])
                .arg(&path)
                .output()
                .expect("run git hash-object");
            let theirs = String::from_utf8_lossy(&git.stdout).trim().to_owned();
            assert_eq!(ours.to_string(), theirs, "{name}");
            assert_eq!(ours, Odb::hash(Kind::Blob, &data).expect("hash"), "{name}");
            assert_eq!(
                Odb::hash_file_blob(&path, size as u64 + 1).expect("read"),
                None,
                "{name}: shorter than expected"
            );
            if size > 0 {
                assert_eq!(
                    Odb::hash_file_blob(&path, size as u64 - 1).expect("read"),
                    None,
                    "{name}: longer than expected"
                );
            }
        }
    }

    /// A tree read before comes from memory only while the store still holds it: once its object is gone
    /// from this store, or in another store that never had it, reading it is an error again.
    #[test]
    fn a_kept_tree_does_not_hide_a_missing_object() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let odb = Odb::new(dir.path().join("objects"));
        let other = Odb::new(dir.path().join("other"));
        let entry = Odb::hash(Kind::Blob, b"kept").expect("hash");
        let mut data = b"100644 kept.txt\0".to_vec();
        data.extend_from_slice(entry.as_bytes());
        let id = odb.write_buf(Kind::Tree, &data).expect("write the tree");
        assert_eq!(&*odb.read_tree(&id).expect("read"), &data[..]);
        assert_eq!(&*odb.read_tree(&id).expect("read again"), &data[..]);
        assert!(matches!(other.read_tree(&id), Err(GitError::Missing(_))));
        fs::remove_file(odb.path_of(&id)).expect("delete the object");
        assert!(matches!(odb.read_tree(&id), Err(GitError::Missing(_))));
        assert!(tree_cache().get(&id).is_some(), "the content stays known");
    }
}
