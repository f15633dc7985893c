//! Replacing a file with as little waiting as the filesystem allows (every write is a temporary file
//! renamed over the target, SPEC 2.5).
//!
//! A new file's blocks are reserved before it is written (`preallocate`): ext4 otherwise starts writing a
//! file out when it is renamed over another (its `auto_da_alloc` guard for programs that do not fsync),
//! inside the rename.
//!
//! Files replaced or deleted are freed off the operation's path. Before a file is renamed over, or
//! unlinked, it is opened (`O_PATH`, no access to its content), and that handle is closed later on a
//! background thread: the kernel frees a file's blocks when its last link and handle are gone, and on some
//! filesystems that waits for the disk (ext4 without a journal discards the blocks there and then; any
//! filesystem takes a while over a big file). What the worktree holds is the same either way: the name
//! points at the new file, or at nothing, from the moment of the rename or unlink.
//!
//! At most `MAX_HELD` handles are held at once in the process; past that a file is freed at once, as
//! without this. A process that ends closes what it still holds.
//!
//! Both are done on ext4 only, where they were measured. Elsewhere they could cost instead: on NFS a
//! reservation is a round trip, and a file renamed over while the client holds it open is kept as a
//! visible `.nfsXXXX` file until the handle closes.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Mutex, OnceLock, PoisonError};

/// Reserves the blocks of a new file of `len` bytes before it is written (its size stays as written; a
/// filesystem that cannot reserve is left to allocate as it writes).
pub fn preallocate(file: &impl std::os::fd::AsFd, len: u64) {
    if len > 0 && rustix::fs::fstatfs(file).is_ok_and(|fs| is_ext4(&fs)) {
        let _ = rustix::fs::fallocate(file, rustix::fs::FallocateFlags::KEEP_SIZE, 0, len);
    }
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
static CLOSER: OnceLock<Option<Mutex<Sender<OwnedFd>>>> = OnceLock::new();

/// A file about to be replaced or deleted, held open until it is handed to `release`.
#[derive(Debug)]
pub struct Held(Option<OwnedFd>);

impl Held {
    /// Holds what stands at `path` now (not following a symlink), when its directory is on ext4 and the
    /// process holds fewer than `MAX_HELD` such files; nothing otherwise (or when nothing can be opened
    /// there).
    pub fn at(path: &Path) -> Held {
        let on_ext4 = path
            .parent()
            .is_some_and(|dir| rustix::fs::statfs(dir).is_ok_and(|fs| is_ext4(&fs)));
        if !on_ext4 {
            return Held(None);
        }
        if HELD.fetch_add(1, Ordering::Relaxed) >= MAX_HELD {
            HELD.fetch_sub(1, Ordering::Relaxed);
            return Held(None);
        }
        use rustix::fs::{Mode, OFlags};
        match rustix::fs::open(
            path,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => Held(Some(fd)),
            Err(_) => {
                HELD.fetch_sub(1, Ordering::Relaxed);
                Held(None)
            }
        }
    }

    /// Hands the file to the background thread, which closes it (and the kernel frees it there).
    pub fn release(mut self) {
        let Some(fd) = self.0.take() else {
            return;
        };
        match closer() {
            Some(inbox) => {
                let sent = inbox
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .send(fd);
                if let Err(unsent) = sent {
                    close(unsent.0);
                }
            }
            None => close(fd),
        }
    }
}

impl Drop for Held {
    /// A file not handed to `release` (an error came first) is closed here.
    fn drop(&mut self) {
        if let Some(fd) = self.0.take() {
            close(fd);
        }
    }
}

fn close(fd: OwnedFd) {
    drop(fd);
    HELD.fetch_sub(1, Ordering::Relaxed);
}

fn closer() -> Option<&'static Mutex<Sender<OwnedFd>>> {
    CLOSER
        .get_or_init(|| {
            let (inbox, handles) = channel::<OwnedFd>();
            std::thread::Builder::new()
                .name("rewind-release".to_owned())
                .spawn(move || {
                    for fd in handles {
                        close(fd);
                    }
                })
                .ok()
                .map(|_| Mutex::new(inbox))
        })
        .as_ref()
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
        assert!(
            rustix::fs::fstat(&new).expect("fstat").st_blocks >= 2048,
            "1 MiB reserved on ext4"
        );
        assert_eq!(
            new.metadata().expect("stat").len(),
            0,
            "the size stays as written"
        );
        let tmp = dir.path().join("tmp");
        std::fs::write(&tmp, b"new").expect("write");
        std::fs::rename(&tmp, &target).expect("rename");
        assert_eq!(std::fs::read(&target).expect("read"), b"new");
        let fd = held.0.as_ref().expect("the file is held");
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
