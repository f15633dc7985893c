//! Changing worktree paths through a handle on their directory, opened without following a symlink and
//! without leaving the worktree (SPEC 2.5: no write goes through a symlink).
//!
//! A check by path ("every parent is a real directory") and a write by path are two lookups: a directory
//! replaced by a symlink between them (by the agent, an editor, another program) would send the write
//! where the symlink points, outside the worktree too. Here the directory is opened once, with every
//! symlink on the way refused (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`; where the kernel
//! has no `openat2`, one component at a time with `O_NOFOLLOW`), and the file is created, renamed, linked
//! or removed relative to that handle: whatever happens to the path afterwards, the change lands in the
//! directory that was checked.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{Mode, OFlags, ResolveFlags};

/// A handle on the worktree's root directory.
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
}

/// A directory opened as a handle for the `*at` calls only.
const PATH_FLAGS: OFlags = OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC);

/// Set when `openat2` was found missing (old kernel, or refused by a seccomp filter): every later
/// lookup walks the components.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

impl Root {
    /// Opens the worktree's root (a symlink naming the worktree itself is followed: it is the worktree);
    /// the tests' way in. The product opens a store's root with `open_real`.
    #[cfg(test)]
    pub fn open(worktree: &Path) -> io::Result<Root> {
        let fd = rustix::fs::open(
            worktree,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Root { fd })
    }

    /// Opens the worktree's root at its canonical path `worktree` while no component of that path is a
    /// symlink (`ELOOP` otherwise): the directory checked as the worktree, held for the whole operation,
    /// so a worktree replaced by a symlink later (`mv proj old && ln -s elsewhere proj`) sends no change
    /// elsewhere (review: each step of an operation opened the root by path again).
    pub fn open_real(worktree: &Path) -> io::Result<Root> {
        if !NO_OPENAT2.load(Ordering::Relaxed) {
            let resolve = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
            for _ in 0..8 {
                match rustix::fs::openat2(
                    rustix::fs::CWD,
                    worktree,
                    PATH_FLAGS,
                    Mode::empty(),
                    resolve,
                ) {
                    Ok(fd) => return Ok(Root { fd }),
                    Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {
                        NO_OPENAT2.store(true, Ordering::Relaxed);
                        break;
                    }
                    // An unrelated rename anywhere on the system makes the kernel ask for a retry.
                    Err(rustix::io::Errno::AGAIN) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        // Without `openat2`: one component at a time, none followed.
        let mut fd = rustix::fs::open("/", PATH_FLAGS, Mode::empty())?;
        for component in worktree.components() {
            if let std::path::Component::Normal(name) = component {
                fd = rustix::fs::openat(&fd, name, PATH_FLAGS | OFlags::NOFOLLOW, Mode::empty())?;
            }
        }
        Ok(Root { fd })
    }

    /// Another handle on the same directory.
    pub fn try_clone(&self) -> io::Result<Root> {
        Ok(Root {
            fd: self.fd.try_clone()?,
        })
    }

    /// The worktree directory `dir` (`""` for the root, else `a/b`), opened as a handle for the `*at`
    /// calls. Fails with `ELOOP` or `ENOTDIR` when a component is a symlink or not a directory,
    /// `ENOENT` when one is missing, and `EXDEV` when the path would leave the worktree.
    pub fn dir(&self, dir: &str) -> io::Result<OwnedFd> {
        self.dir_with(dir, NO_OPENAT2.load(Ordering::Relaxed), PATH_FLAGS)
    }

    /// `dir`, opened as `dir` does, for reading its entries (`rustix::fs::Dir`).
    pub fn dir_for_reading(&self, dir: &str) -> io::Result<OwnedFd> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        self.dir_with(dir, NO_OPENAT2.load(Ordering::Relaxed), flags)
    }

    /// The file `name` of directory `dir` (a handle from `dir`) opened for reading while it is a regular
    /// file: never through a symlink put there (`O_NOFOLLOW`: `ELOOP`), never waiting on a FIFO
    /// (`O_NONBLOCK`, then `fstat`); see `crate::odb::open_regular`.
    pub fn file_for_reading(dir: &impl AsFd, name: &str) -> io::Result<std::fs::File> {
        crate::odb::opened_regular(|flags| {
            rustix::fs::openat(dir, name, flags | OFlags::NOFOLLOW, Mode::empty())
        })
    }

    fn dir_with(&self, dir: &str, walk: bool, flags: OFlags) -> io::Result<OwnedFd> {
        let dir = if dir.is_empty() { "." } else { dir };
        if !walk {
            let resolve =
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
            match rustix::fs::openat2(&self.fd, dir, flags, Mode::empty(), resolve) {
                Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {
                    NO_OPENAT2.store(true, Ordering::Relaxed);
                }
                // An unrelated rename anywhere on the system makes the kernel ask for a retry.
                Err(rustix::io::Errno::AGAIN) => {}
                other => return other.map_err(io::Error::from),
            }
        }
        let components: Vec<&str> = dir
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .collect();
        if components.is_empty() {
            // The top itself, opened as asked (its handle is `O_PATH`).
            return rustix::fs::openat(&self.fd, ".", flags, Mode::empty())
                .map_err(io::Error::from);
        }
        let mut current = rustix::io::dup(&self.fd)?;
        for (at, component) in components.iter().enumerate() {
            if *component == ".." {
                return Err(io::Error::from_raw_os_error(libc_exdev()));
            }
            // Directories on the way as handles only; the last one as asked.
            let flags = if at + 1 == components.len() {
                flags
            } else {
                PATH_FLAGS
            };
            // `O_NOFOLLOW` with `O_PATH` would open a symlink itself; `O_DIRECTORY` makes that ENOTDIR.
            current = rustix::fs::openat(
                &current,
                *component,
                flags | OFlags::NOFOLLOW,
                Mode::empty(),
            )?;
        }
        Ok(current)
    }

    /// Removes the worktree directory `rel` (not the root) through its parent's handle, no symlink
    /// followed, when it is empty and `only_if` (given that handle and its name) agrees; whether it was
    /// removed.
    pub fn remove_empty_dir_if(
        &self,
        rel: &str,
        only_if: impl FnOnce(&OwnedFd, &str) -> bool,
    ) -> bool {
        let (parent, name) = split(rel);
        !name.is_empty()
            && self.dir(parent).is_ok_and(|fd| {
                only_if(&fd, name)
                    && rustix::fs::unlinkat(&fd, name, rustix::fs::AtFlags::REMOVEDIR).is_ok()
            })
    }

    /// `remove_empty_dir_if` with no further condition.
    pub fn remove_empty_dir(&self, rel: &str) -> bool {
        self.remove_empty_dir_if(rel, |_, _| true)
    }
}

fn libc_exdev() -> i32 {
    rustix::io::Errno::XDEV.raw_os_error()
}

/// Whether `e` says the directory looked for is not what was checked any more: gone, a symlink or a file
/// now, or leading out of the worktree. What was planned there is then left alone.
pub fn moved(e: &io::Error) -> bool {
    use rustix::io::Errno;
    e.raw_os_error().is_some_and(|code| {
        [Errno::NOENT, Errno::NOTDIR, Errno::LOOP, Errno::XDEV]
            .iter()
            .any(|errno| errno.raw_os_error() == code)
    })
}

/// `dir` and the name in it of worktree path `rel`.
pub fn split(rel: &str) -> (&str, &str) {
    rel.rsplit_once('/').unwrap_or(("", rel))
}

/// lstat of `name` in `dir`.
pub fn lstat_at(dir: &impl AsFd, name: &str) -> io::Result<rustix::fs::Stat> {
    rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).map_err(io::Error::from)
}

/// Removes directory `name` of `parent` and the directories below it, when it holds nothing else: anything
/// but a directory found on the way fails the removal with `ENOTEMPTY` (what was removed before it stays
/// removed: empty directories only). A symlink is never followed.
pub fn remove_empty_tree(parent: &impl AsFd, name: &str) -> io::Result<()> {
    let dir = rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut children = Vec::new();
    for entry in rustix::fs::Dir::read_from(&dir)? {
        let entry = entry?;
        let child = entry.file_name().to_bytes();
        if child == b"." || child == b".." {
            continue;
        }
        let kind = match entry.file_type() {
            // A filesystem that does not say in its listing.
            rustix::fs::FileType::Unknown => {
                rustix::fs::FileType::from_raw_mode(lstat_at(&dir, child_name(child)?)?.st_mode)
            }
            kind => kind,
        };
        if kind != rustix::fs::FileType::Directory {
            return Err(rustix::io::Errno::NOTEMPTY.into());
        }
        children.push(std::ffi::OsStr::from_bytes(child).to_owned());
    }
    for child in children {
        remove_empty_tree(&dir, child_name(child.as_bytes())?)?;
    }
    rustix::fs::unlinkat(parent, name, rustix::fs::AtFlags::REMOVEDIR)?;
    Ok(())
}

/// A directory entry's name as the `*at` calls here take it (rewind's paths are UTF-8; another name stops
/// the removal).
fn child_name(name: &[u8]) -> io::Result<&str> {
    std::str::from_utf8(name).map_err(|_| io::Error::from(rustix::io::Errno::NOTEMPTY))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both ways of looking up refuse a symlink anywhere on the way, and `..`.
    #[test]
    fn both_lookups_refuse_symlinks_and_dot_dot() {
        let outside = tempfile::tempdir().expect("tempdir");
        let wt = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(wt.path().join("a/b")).expect("mkdir");
        std::os::unix::fs::symlink(outside.path(), wt.path().join("a/link")).expect("symlink");
        std::os::unix::fs::symlink("b", wt.path().join("a/inner")).expect("symlink");
        std::fs::write(wt.path().join("a/file"), "x").expect("write");
        let root = Root::open(wt.path()).expect("root");
        let reading = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        for (walk, flags) in [
            (false, PATH_FLAGS),
            (true, PATH_FLAGS),
            (false, reading),
            (true, reading),
        ] {
            assert!(root.dir_with("a/b", walk, flags).is_ok(), "walk={walk}");
            assert!(root.dir_with("", walk, flags).is_ok(), "walk={walk}");
            for refused in ["a/link", "a/inner", "a/link/x", "a/file", "../x"] {
                let e = root.dir_with(refused, walk, flags).expect_err(refused);
                assert!(moved(&e), "walk={walk} {refused}: {e}");
            }
            let e = root
                .dir_with("a/missing", walk, flags)
                .expect_err("missing");
            assert!(moved(&e), "{e}");
        }
        // A handle for reading lists the directory's entries, opened either way.
        for walk in [false, true] {
            let fd = root.dir_with("a", walk, reading).expect("a");
            let names: std::collections::BTreeSet<String> = rustix::fs::Dir::new(fd)
                .expect("read a")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .filter(|n| n != "." && n != "..")
                .collect();
            assert_eq!(names.len(), 4, "walk={walk}: {names:?}");
        }
        let top = root.dir_for_reading("").expect("the top");
        assert!(rustix::fs::Dir::new(top).expect("read the top").count() >= 3);
        for walk in [false, true] {
            let top = root.dir_with("", walk, reading).expect("the top");
            let listed = rustix::fs::Dir::new(top).expect("read the top").count();
            assert!(
                listed >= 3,
                "walk={walk}: the top's handle reads its entries"
            );
        }
    }

    /// A handle keeps naming the directory that was opened after its path is turned into a symlink.
    #[test]
    fn a_handle_outlives_a_swap_of_its_path() {
        let outside = tempfile::tempdir().expect("tempdir");
        let wt = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(wt.path().join("d")).expect("mkdir");
        let root = Root::open(wt.path()).expect("root");
        let dir = root.dir("d").expect("dir");
        std::fs::rename(wt.path().join("d"), wt.path().join("moved")).expect("rename");
        std::os::unix::fs::symlink(outside.path(), wt.path().join("d")).expect("symlink");
        rustix::fs::mkdirat(&dir, "new", Mode::from_raw_mode(0o755)).expect("mkdirat");
        assert!(wt.path().join("moved/new").is_dir());
        assert_eq!(std::fs::read_dir(outside.path()).expect("ls").count(), 0);
    }

    #[test]
    fn an_empty_tree_is_removed_and_a_file_stops_it() {
        let wt = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(wt.path().join("e/a/b")).expect("mkdir");
        std::fs::create_dir_all(wt.path().join("e/c")).expect("mkdir");
        std::fs::create_dir_all(wt.path().join("f/a")).expect("mkdir");
        std::fs::write(wt.path().join("f/a/x"), "x").expect("write");
        let root = Root::open(wt.path()).expect("root");
        let top = root.dir("").expect("dir");
        remove_empty_tree(&top, "e").expect("removed");
        assert!(!wt.path().join("e").exists());
        let e = remove_empty_tree(&top, "f").expect_err("holds a file");
        assert_eq!(
            e.raw_os_error(),
            Some(rustix::io::Errno::NOTEMPTY.raw_os_error())
        );
        assert!(wt.path().join("f/a/x").is_file());
    }
}
