//! Replacing a file with as little waiting as the filesystem allows (every write is a temporary file
//! renamed over the target, SPEC 2.5).
//!
//! On ext4 without a journal, a new file's blocks are reserved before it is written (`preallocate`): ext4
//! otherwise starts writing a file out when it is renamed over another (its `auto_da_alloc` guard for
//! programs that do not fsync), inside the rename. With a journal that guard is kept: it is what makes a
//! file renamed over another come back after a power loss with its old content or its new one, never
//! empty (the rename's journal commit waits for the new file's data, which the rename started writing;
//! a reserved file is not written out there, and its data waits up to the 30 s write-back, while the
//! rename is committed within 5 s). Reserving measured no gain there either (`cargo xtask bench
//! snapshot`, 1,000-file revert at 10,000 files, alternated: 110.5 and 175.6 ms with it, 110.0 and 116.5
//! without). Without a journal nothing orders the rename after the data anyway.
//!
//! Files replaced or deleted are freed off the operation's path. Before a file is renamed over, or
//! unlinked, it is opened (`O_PATH`, no access to its content), and that handle is closed later on a
//! background thread: the kernel frees a file's blocks when its last link and handle are gone, and on some
//! filesystems that waits for the disk (ext4 without a journal discards the blocks there and then; any
//! filesystem takes a while over a big file). What the worktree holds is the same either way: the name
//! points at the new file, or at nothing, from the moment of the rename or unlink.
//!
//! At most `MAX_HELD` handles are held at once in the process; past that a file is freed at once, as
//! without this. A process that ends closes what it still holds. A thread that writes many files hands
//! them over in batches of 8 (`Releases`): each hand-over wakes the background thread, which then takes
//! a core from the writes (on 2 cores, a 30-file revert woke it 30 times). The caller that just created a
//! temporary file beside the target already knows whether the directory is on ext4 (`preallocate`
//! says), so `Held::on_ext4` skips asking the filesystem again.
//!
//! Both are done on ext4 only, where they were measured. Elsewhere they could cost instead: on NFS a
//! reservation is a round trip, and a file renamed over while the client holds it open is kept as a
//! visible `.nfsXXXX` file until the handle closes.
//!
//! On ext4 without a journal, the background thread also asks for the filesystem's write-back (`syncfs`)
//! once the files it freed have been closed and no more arrive for `SETTLE`. There the kernel skips, when
//! it allocates an inode, every inode freed within the last minute (five seconds before Linux 5.7), or within five minutes while the
//! block of the inode table holding it is not yet written back; each skip is a lookup. Every file rewind
//! writes is a new inode (the temporary file) and frees one (the file renamed over), so back-to-back
//! operations made each new file cost a scan past hundreds of freed inodes (measured on such a disk: the
//! writes of a 30-file revert in `cargo xtask bench http` took 7.5 ms, 2.5 ms with the write-back).
//! Written back, the freed inodes count for a minute only. The files just written reach the disk
//! sooner as well. With a journal, the kernel does not check, and nothing is asked. A write-back that takes
//! long (much else dirty on the filesystem) only delays the closing of the files handed over meanwhile;
//! past `MAX_HELD` of them, files are freed at once, as without this.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// Reserves the blocks of a new file of `len` bytes before it is written, on ext4 without a journal only
/// (see the module's text; its size stays as written; a filesystem that cannot reserve is left to
/// allocate as it writes). Returns whether the file is on ext4 (`Held::on_ext4` takes it for a file
/// renamed over from the same directory).
pub fn preallocate(file: &impl std::os::fd::AsFd, len: u64) -> bool {
    let ext4 = rustix::fs::fstatfs(file).is_ok_and(|fs| is_ext4(&fs));
    #[allow(clippy::unnecessary_cast)]
    let journal_less = || rustix::fs::fstat(file).is_ok_and(|st| lacks_journal(st.st_dev as u64));
    if ext4 && len > 0 && journal_less() {
        let _ = rustix::fs::fallocate(file, rustix::fs::FallocateFlags::KEEP_SIZE, 0, len);
    }
    ext4
}

/// Whether the file or directory of `fd` is on ext4.
pub fn is_ext4_fd(fd: &impl std::os::fd::AsFd) -> bool {
    rustix::fs::fstatfs(fd).is_ok_and(|fs| is_ext4(&fs))
}

/// Whether a filesystem is ext4 (ext2 and ext3 share the magic number, and are served by ext4's driver).
fn is_ext4(fs: &rustix::fs::StatFs) -> bool {
    const EXT4_SUPER_MAGIC: u64 = 0xEF53;
    u64::try_from(fs.f_type).is_ok_and(|kind| kind == EXT4_SUPER_MAGIC)
}

/// How many replaced files the process may hold open at once.
const MAX_HELD: usize = 128;

static HELD: AtomicUsize = AtomicUsize::new(0);

/// The background thread's inbox (none when it could not be started).
static CLOSER: OnceLock<Option<Mutex<Sender<Vec<Release>>>>> = OnceLock::new();

/// How long the background thread waits for more files after the last one before it asks for the
/// write-back: an operation frees its files in bursts a few milliseconds apart, and a write-back in the
/// middle of one leaves the rest to wait for the next.
const SETTLE: Duration = Duration::from_millis(20);

/// The longest the write-back waits after the first file freed since the last one, while more keep coming.
const MOST: Duration = Duration::from_millis(100);

/// How many write-backs the background thread has asked for (read by tests).
static SYNCS: AtomicUsize = AtomicUsize::new(0);

/// A file about to be replaced or deleted, held open until it is handed to `release`.
#[derive(Debug)]
pub struct Held(Option<Release>);

/// A held file and, when it is on ext4 without a journal, that filesystem's device and the file's directory
/// (where the write-back is asked).
#[derive(Debug)]
struct Release {
    fd: OwnedFd,
    sync_in: Option<(u64, PathBuf)>,
}

impl Held {
    /// Nothing held (nothing stood where the file was written).
    pub fn none() -> Held {
        Held(None)
    }

    /// Holds what stands at `path` now, asking the filesystem whether its directory is on ext4.
    #[cfg(test)]
    pub fn at(path: &Path) -> Held {
        let ext4 = path
            .parent()
            .is_some_and(|dir| rustix::fs::statfs(dir).is_ok_and(|fs| is_ext4(&fs)));
        Held::on_ext4(path, ext4)
    }

    /// Holds what stands at `path` now (not following a symlink), for a caller that knows whether
    /// `path`'s directory is on ext4 (a temporary file beside it was just created there, see
    /// `preallocate`); see `of`.
    pub fn on_ext4(path: &Path, ext4: bool) -> Held {
        let Some(dir) = path.parent().filter(|_| ext4) else {
            return Held(None);
        };
        if HELD.load(Ordering::Relaxed) >= MAX_HELD {
            return Held(None);
        }
        use rustix::fs::{Mode, OFlags};
        match rustix::fs::open(
            path,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => match rustix::fs::fstat(&fd) {
                #[allow(clippy::unnecessary_cast)]
                Ok(st) => Held::of(fd, st.st_dev as u64, dir, true),
                Err(_) => Held(None),
            },
            Err(_) => Held(None),
        }
    }

    /// Holds `fd`, a handle (`O_PATH` is enough) on a file of directory `dir` on device `dev` that is
    /// about to be replaced or deleted, when the directory is on ext4 (`ext4`) and the process holds
    /// fewer than `MAX_HELD` such files; otherwise the handle is closed here.
    pub fn of(fd: OwnedFd, dev: u64, dir: &Path, ext4: bool) -> Held {
        if !ext4 || HELD.fetch_add(1, Ordering::Relaxed) >= MAX_HELD {
            if ext4 {
                HELD.fetch_sub(1, Ordering::Relaxed);
            }
            return Held(None);
        }
        let sync_in = lacks_journal(dev).then(|| (dev, dir.to_path_buf()));
        Held(Some(Release { fd, sync_in }))
    }

    /// Hands the file to the background thread, which closes it (and the kernel frees it there).
    pub fn release(self) {
        Held::release_all(vec![self]);
    }

    /// Hands all of `held` to the background thread at once (one message, one wake-up).
    pub fn release_all(held: Vec<Held>) {
        let releases: Vec<Release> = held.into_iter().filter_map(|mut h| h.0.take()).collect();
        if releases.is_empty() {
            return;
        }
        // Closed here when the background thread is not there to take them.
        let unsent = match closer() {
            Some(inbox) => inbox
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .send(releases)
                .err()
                .map(|unsent| unsent.0),
            None => Some(releases),
        };
        for release in unsent.into_iter().flatten() {
            close(release.fd);
        }
    }
}

/// Files replaced by one thread, handed to the background thread together when there are `BATCH` of them
/// and when this is dropped (each hand-over wakes that thread, which then competes for a core).
#[derive(Default)]
pub struct Releases(Vec<Held>);

impl Releases {
    /// How many files are handed over at once at most: the at most 16 threads a revert writes with then hold
    /// fewer than `MAX_HELD` files between them, so none is freed on the spot for want of a handle.
    const BATCH: usize = 8;

    /// Adds a file to hand over.
    pub fn push(&mut self, held: Held) {
        if held.0.is_some() {
            self.0.push(held);
        }
        if self.0.len() >= Releases::BATCH {
            Held::release_all(std::mem::take(&mut self.0));
        }
    }
}

impl Drop for Releases {
    fn drop(&mut self) {
        Held::release_all(std::mem::take(&mut self.0));
    }
}

impl Drop for Held {
    /// A file not handed to `release` (an error came first) is closed here.
    fn drop(&mut self) {
        if let Some(release) = self.0.take() {
            close(release.fd);
        }
    }
}

fn close(fd: OwnedFd) {
    drop(fd);
    HELD.fetch_sub(1, Ordering::Relaxed);
}

fn closer() -> Option<&'static Mutex<Sender<Vec<Release>>>> {
    CLOSER
        .get_or_init(|| {
            let (inbox, handles) = channel::<Vec<Release>>();
            std::thread::Builder::new()
                .name("rewind-release".to_owned())
                .spawn(move || close_and_write_back(&handles))
                .ok()
                .map(|_| Mutex::new(inbox))
        })
        .as_ref()
}

/// The background thread: closes each file handed over; once none has come for `SETTLE`, asks for the
/// write-back of each journal-less ext4 filesystem a closed file was on (through one of its directories
/// still there).
fn close_and_write_back(handles: &Receiver<Vec<Release>>) {
    let mut to_sync: HashMap<u64, Vec<PathBuf>> = HashMap::new();
    let mut first_unsynced = Instant::now();
    loop {
        let next = if to_sync.is_empty() {
            handles.recv().map_err(|_| RecvTimeoutError::Disconnected)
        } else {
            let deadline = first_unsynced + MOST;
            handles.recv_timeout(SETTLE.min(deadline.saturating_duration_since(Instant::now())))
        };
        match next {
            Ok(releases) => {
                for Release { fd, sync_in } in releases {
                    close(fd);
                    if let Some((dev, dir)) = sync_in {
                        if to_sync.is_empty() {
                            first_unsynced = Instant::now();
                        }
                        let dirs = to_sync.entry(dev).or_default();
                        if dirs.len() < 4 && !dirs.contains(&dir) {
                            dirs.push(dir);
                        }
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                for dirs in std::mem::take(&mut to_sync).into_values() {
                    write_back(&dirs);
                }
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// `syncfs` through the first of `dirs` that can still be opened (all on one filesystem).
fn write_back(dirs: &[PathBuf]) {
    use rustix::fs::{Mode, OFlags};
    for dir in dirs {
        if let Ok(fd) = rustix::fs::open(
            dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            let _ = rustix::fs::syncfs(&fd);
            SYNCS.fetch_add(1, Ordering::Relaxed);
            return;
        }
    }
}

/// Whether the filesystem of device `dev` is ext4 without a journal, as the kernel reports it: the block
/// device's name from sysfs, its ext4 entry under /proc/fs/ext4, and no journal of it under /proc/fs/jbd2.
/// Anything unreadable counts as "has a journal" (nothing is asked). Looked up once per device.
fn lacks_journal(dev: u64) -> bool {
    static KNOWN: Mutex<Option<HashMap<u64, bool>>> = Mutex::new(None);
    let mut known = KNOWN.lock().unwrap_or_else(PoisonError::into_inner);
    *known
        .get_or_insert_with(HashMap::new)
        .entry(dev)
        .or_insert_with(|| journal_less_by_kernel(dev, Path::new("/sys"), Path::new("/proc")))
}

fn journal_less_by_kernel(dev: u64, sys: &Path, proc: &Path) -> bool {
    let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    let uevent = sys.join(format!("dev/block/{major}:{minor}/uevent"));
    let Some(name) = std::fs::read_to_string(uevent).ok().and_then(|text| {
        text.lines()
            .find_map(|line| line.strip_prefix("DEVNAME="))
            .map(|name| name.replace('/', "!"))
    }) else {
        return false;
    };
    if !proc.join("fs/ext4").join(&name).is_dir() {
        return false;
    }
    let journal_prefix = format!("{name}-");
    match std::fs::read_dir(proc.join("fs/jbd2")) {
        Ok(journals) => !journals.flatten().any(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .starts_with(&journal_prefix)
        }),
        // No jbd2 directory at all: no filesystem has a journal now.
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::path::PathBuf;

    use super::*;

    /// The open handles of this process that name `path` (a deleted file's name ends in " (deleted)").
    fn handles_on(path: &Path) -> usize {
        let deleted = PathBuf::from(format!("{} (deleted)", path.display()));
        std::fs::read_dir("/proc/self/fd")
            .expect("list /proc/self/fd")
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target == path || *target == deleted)
            .count()
    }

    /// A new empty file `new` in `dir`.
    fn created(dir: &Path) -> std::fs::File {
        std::fs::File::options()
            .write(true)
            .create_new(true)
            .open(dir.join("new"))
            .expect("create")
    }

    /// A held file stays the same file while held (its inode is not freed), whatever is renamed over its
    /// name; once released it is closed on the background thread.
    #[test]
    fn a_replaced_file_is_held_until_released_then_closed() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let target = dir.path().join("file");
        std::fs::write(&target, b"old").expect("write");
        let old_ino = std::fs::metadata(&target).expect("stat").ino();
        let held = Held::at(&target);
        if !rustix::fs::statfs(dir.path()).is_ok_and(|fs| is_ext4(&fs)) {
            assert!(held.0.is_none(), "only a file on ext4 is held");
            return;
        }
        let new = created(dir.path());
        preallocate(&new, 1 << 20);
        if let Some(journal_less) = journal_less_by_mount_table(dir.path()) {
            assert_eq!(
                rustix::fs::fstat(&new).expect("fstat").st_blocks >= 2048,
                journal_less,
                "1 MiB reserved on ext4 without a journal, nothing with one"
            );
        }
        assert_eq!(
            new.metadata().expect("stat").len(),
            0,
            "the size stays as written"
        );
        let tmp = dir.path().join("tmp");
        std::fs::write(&tmp, b"new").expect("write");
        std::fs::rename(&tmp, &target).expect("rename");
        assert_eq!(std::fs::read(&target).expect("read"), b"new");
        let fd = &held.0.as_ref().expect("the file is held").fd;
        let st = rustix::fs::fstat(fd).expect("fstat the held file");
        assert_eq!(st.st_ino, old_ino, "the handle is the replaced file");
        assert_eq!(st.st_nlink, 0, "which no name points at any more");
        assert_eq!(handles_on(&target), 1);
        held.release();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while handles_on(&target) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(handles_on(&target), 0, "a released file is closed");
        assert!(Held::at(&dir.path().join("absent")).0.is_none());
    }

    /// Files collected in `Releases` stay held until a batch is full or the collection is dropped, then are
    /// closed on the background thread; a file not on ext4 (as the caller says) is not held at all.
    #[test]
    fn releases_hand_files_over_in_batches_and_when_dropped() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        if !rustix::fs::statfs(dir.path()).is_ok_and(|fs| is_ext4(&fs)) {
            return;
        }
        let closed = |paths: &[PathBuf]| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while paths.iter().any(|p| handles_on(p) > 0) && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            paths.iter().all(|p| handles_on(p) == 0)
        };
        let paths: Vec<PathBuf> = (0..Releases::BATCH + 2)
            .map(|i| dir.path().join(format!("f{i}")))
            .collect();
        for path in &paths {
            std::fs::write(path, b"old").expect("write");
        }
        assert!(Held::on_ext4(&paths[0], false).0.is_none());
        let mut releases = Releases::default();
        for path in &paths[..Releases::BATCH - 1] {
            releases.push(Held::on_ext4(path, true));
        }
        assert!(
            paths[..Releases::BATCH - 1]
                .iter()
                .all(|p| handles_on(p) == 1),
            "held while the batch is not full"
        );
        releases.push(Held::on_ext4(&paths[Releases::BATCH - 1], true));
        assert!(
            closed(&paths[..Releases::BATCH]),
            "a full batch is handed over"
        );
        for path in &paths[Releases::BATCH..] {
            releases.push(Held::on_ext4(path, true));
        }
        assert!(paths[Releases::BATCH..].iter().all(|p| handles_on(p) == 1));
        drop(releases);
        assert!(closed(&paths[Releases::BATCH..]), "the rest when dropped");
    }

    /// A fake /sys and /proc with a block device `major:minor` named `name`, its ext4 entry, and the given
    /// journals.
    fn fake_kernel(root: &Path, major: u32, minor: u32, name: &str, journals: &[&str]) {
        let dev = root.join(format!("sys/dev/block/{major}:{minor}"));
        std::fs::create_dir_all(&dev).expect("mkdir");
        std::fs::write(
            dev.join("uevent"),
            format!("MAJOR={major}\nMINOR={minor}\nDEVNAME={name}\nDEVTYPE=partition\n"),
        )
        .expect("write uevent");
        std::fs::create_dir_all(root.join("proc/fs/ext4").join(name)).expect("mkdir");
        std::fs::create_dir_all(root.join("proc/fs/jbd2")).expect("mkdir");
        for journal in journals {
            std::fs::create_dir_all(root.join("proc/fs/jbd2").join(journal)).expect("mkdir");
        }
    }

    /// The kernel's report decides: an ext4 device with no journal under /proc/fs/jbd2 lacks one; one with
    /// a journal there, a device that is not ext4 and a device sysfs does not name do not count.
    #[test]
    fn a_missing_journal_is_read_from_the_kernels_report() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (sys, proc) = (dir.path().join("sys"), dir.path().join("proc"));
        fake_kernel(dir.path(), 8, 1, "sda1", &["sdb1-8"]);
        let sda1 = rustix::fs::makedev(8, 1);
        assert!(
            journal_less_by_kernel(sda1, &sys, &proc),
            "sdb1's journal is not sda1's"
        );
        std::fs::create_dir(proc.join("fs/jbd2/sda1-8")).expect("mkdir");
        assert!(
            !journal_less_by_kernel(sda1, &sys, &proc),
            "sda1 has a journal now"
        );
        std::fs::remove_dir_all(proc.join("fs/jbd2")).expect("rm jbd2");
        assert!(
            journal_less_by_kernel(sda1, &sys, &proc),
            "no jbd2 at all: no filesystem has a journal"
        );
        std::fs::remove_dir(proc.join("fs/ext4/sda1")).expect("rm ext4 entry");
        assert!(
            !journal_less_by_kernel(sda1, &sys, &proc),
            "not an ext4 filesystem"
        );
        let unnamed = rustix::fs::makedev(8, 2);
        assert!(
            !journal_less_by_kernel(unnamed, &sys, &proc),
            "sysfs does not name it"
        );
    }

    /// The device name of the filesystem holding `path`, read another way than `lacks_journal` does: the
    /// mount source in /proc/self/mountinfo (`/dev/NAME`) of the longest mount point above `path`.
    fn mount_source_name(path: &Path) -> Option<String> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        mountinfo
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                let mount_point = Path::new(fields.get(4)?);
                let after = fields.iter().position(|f| *f == "-")?;
                let source = fields.get(after + 2)?;
                path.starts_with(mount_point)
                    .then(|| (mount_point.as_os_str().len(), source.to_string()))
            })
            .max()
            .and_then(|(_, source)| source.strip_prefix("/dev/").map(str::to_owned))
    }

    /// Whether the ext4 filesystem holding `path` lacks a journal, found through the mount table (none when
    /// the mount table names its device otherwise than the kernel's ext4 report does, e.g.
    /// `/dev/mapper/…` or `/dev/root`).
    fn journal_less_by_mount_table(path: &Path) -> Option<bool> {
        let name = mount_source_name(path)?;
        if !Path::new("/proc/fs/ext4").join(&name).is_dir() {
            return None;
        }
        let journalled = std::fs::read_dir("/proc/fs/jbd2").is_ok_and(|journals| {
            journals.flatten().any(|j| {
                j.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("{name}-"))
            })
        });
        Some(!journalled)
    }

    /// A new file's blocks are reserved on ext4 without a journal, and not on ext4 with one, where the
    /// kernel's guard for a file renamed over another (`auto_da_alloc`) is kept: each is checked in a
    /// directory of that kind, the temporary directory and `REWIND_TEST_JOURNALLED_EXT4` (a directory on
    /// journalled ext4, which `.ci/run` mounts), whichever are there.
    #[test]
    fn a_new_file_is_reserved_only_on_ext4_without_a_journal() {
        let temp = tempfile::tempdir().expect("a temporary directory");
        let mut dirs = vec![temp.path().to_path_buf()];
        let journalled = std::env::var_os("REWIND_TEST_JOURNALLED_EXT4").map(PathBuf::from);
        if let Some(dir) = &journalled {
            assert!(
                rustix::fs::statfs(dir).is_ok_and(|fs| is_ext4(&fs))
                    && journal_less_by_mount_table(dir) == Some(false),
                "REWIND_TEST_JOURNALLED_EXT4={} is not on ext4 with a journal",
                dir.display()
            );
            dirs.push(dir.clone());
        } else {
            eprintln!(
                "REWIND_TEST_JOURNALLED_EXT4 is not set: only the temporary directory's kind is checked"
            );
        }
        for dir in dirs {
            if !rustix::fs::statfs(&dir).is_ok_and(|fs| is_ext4(&fs)) {
                continue;
            }
            let Some(journal_less) = journal_less_by_mount_table(&dir) else {
                continue;
            };
            let inside = tempfile::tempdir_in(&dir).expect("a directory there");
            let file = created(inside.path());
            assert!(preallocate(&file, 1 << 20), "{} is on ext4", dir.display());
            let blocks = rustix::fs::fstat(&file).expect("fstat").st_blocks;
            assert_eq!(
                blocks >= 2048,
                journal_less,
                "in {} (journal-less: {journal_less}): {blocks} blocks",
                dir.display()
            );
            if !journal_less {
                assert_eq!(blocks, 0, "nothing reserved with a journal");
            }
        }
    }

    /// On ext4 without a journal (as the kernel reports it, found through the mount table), a file that is
    /// replaced and released leads to a write-back of its filesystem; with a journal, a held file is not
    /// marked for one.
    #[test]
    fn a_freed_file_on_journal_less_ext4_is_written_back() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        if !rustix::fs::statfs(dir.path()).is_ok_and(|fs| is_ext4(&fs)) {
            return;
        }
        let Some(journal_less) = journal_less_by_mount_table(dir.path()) else {
            return;
        };
        let journalled = !journal_less;
        let target = dir.path().join("file");
        std::fs::write(&target, b"old").expect("write");
        let held = Held::at(&target);
        let marked = held
            .0
            .as_ref()
            .expect("a file on ext4 is held")
            .sync_in
            .is_some();
        assert_eq!(
            marked, !journalled,
            "marked for a write-back exactly without a journal"
        );
        if journalled {
            return;
        }
        let before = SYNCS.load(Ordering::Relaxed);
        let tmp = dir.path().join("tmp");
        std::fs::write(&tmp, b"new").expect("write");
        std::fs::rename(&tmp, &target).expect("rename");
        held.release();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while SYNCS.load(Ordering::Relaxed) == before && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(
            SYNCS.load(Ordering::Relaxed) > before,
            "the filesystem was written back after the file was freed"
        );
    }

    /// Off ext4 (here tmpfs, when the machine has /dev/shm) nothing is held and nothing is reserved.
    #[test]
    fn only_ext4_gets_either() {
        let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
            return;
        };
        assert!(!rustix::fs::statfs(dir.path()).is_ok_and(|fs| is_ext4(&fs)));
        let target = dir.path().join("file");
        std::fs::write(&target, b"old").expect("write");
        assert!(Held::at(&target).0.is_none());
        let file = created(dir.path());
        preallocate(&file, 1 << 20);
        let blocks = rustix::fs::fstat(&file).expect("fstat").st_blocks;
        assert_eq!(blocks, 0, "no blocks reserved off ext4");
    }
}
