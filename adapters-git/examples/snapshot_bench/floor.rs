//! The floors: what the bare system calls an operation cannot do without cost on this machine, timed in the
//! same run as the operation, with no other work, on as many threads as help, and each relative to an open
//! directory (no path looked up from the root per file). An operation that makes these calls (SPEC 2.1,
//! 2.4 and 2.5 say which) cannot take less; a ratio goal below `floor / git` cannot be met on this machine by
//! any implementation of SPEC, which the table says (`MISS:floor`).
//!
//! Each floor is a lower bound, never an estimate of rewind's own cost: where SPEC leaves a choice (owning
//! a loose object by a hard link or by reading it into a pack), the cheaper one counts.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

/// The thread counts each parallel floor is timed on; the fastest counts.
pub fn thread_counts() -> Vec<usize> {
    let nproc = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut counts = vec![1, nproc, 16];
    counts.sort_unstable();
    counts.dedup();
    counts
}

/// The fastest of `measure` on each thread count.
pub fn fastest(mut measure: impl FnMut(usize) -> Result<Duration>) -> Result<Duration> {
    let mut best: Option<Duration> = None;
    for threads in thread_counts() {
        let took = measure(threads)?;
        best = Some(best.map_or(took, |b| b.min(took)));
    }
    best.context("no thread count to time the floor on")
}

/// Files grouped by their directory, in path order: what the per-directory floors share out.
pub struct ByDir(Vec<(PathBuf, Vec<OsString>)>);

impl ByDir {
    pub fn of(files: &[PathBuf]) -> ByDir {
        let mut dirs: BTreeMap<PathBuf, Vec<OsString>> = BTreeMap::new();
        for file in files {
            if let (Some(dir), Some(name)) = (file.parent(), file.file_name()) {
                dirs.entry(dir.to_path_buf())
                    .or_default()
                    .push(name.to_os_string());
            }
        }
        ByDir(dirs.into_iter().collect())
    }
}

fn open_dir(dir: &Path) -> std::io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// How `walk` goes: whether it reads every regular file whole (a first track with nothing to seed from
/// hashes each), whether it gathers the regular files' paths (for `snapshot_bench floor`; outside a timed
/// floor), and the directories it leaves out (ignored: a track does not list them).
pub struct Walk<'a> {
    pub read: bool,
    pub gather: bool,
    pub ignored: &'a [PathBuf],
}

/// Lists every directory of `wt` but `.git` and those `how` leaves out, and lstats every entry that is not
/// a directory (its type is in the listing), shared by `threads` threads through one queue of directories: a
/// track's walk of a tree it has no listing cached for (SPEC 2.4's `track` finds untracked files and looks
/// at every file's stat data). Returns the time and the regular files gathered.
pub fn walk(wt: &Path, threads: usize, how: &Walk) -> Result<(Duration, Vec<PathBuf>)> {
    let queue = Mutex::new(vec![wt.to_path_buf()]);
    // Directories queued or being listed; the walk is over when none are, or when a thread failed.
    let open = AtomicUsize::new(1);
    let failed = AtomicBool::new(false);
    let found = Mutex::new(Vec::new());
    let start = Instant::now();
    on_threads(threads.max(1), |_| {
        // Set however the thread ends, a panic included, so that the others stop waiting (a thread ends
        // without one only once every directory is listed).
        let _stops_others = FailsOthers(&failed);
        walk_queue((&queue, &open, &failed), how, &found)
    })?;
    let elapsed = start.elapsed();
    let files = found
        .into_inner()
        .map_err(|_| anyhow!("a floor thread panicked"))?;
    Ok((elapsed, files))
}

/// Sets its flag when dropped: a walking thread that ended early (an error or a panic) stops the others.
struct FailsOthers<'a>(&'a AtomicBool);

impl Drop for FailsOthers<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// One thread of `walk`: takes directories from the queue until none is open (or a thread failed).
fn walk_queue(
    (queue, open, failed): (&Mutex<Vec<PathBuf>>, &AtomicUsize, &AtomicBool),
    how: &Walk,
    found: &Mutex<Vec<PathBuf>>,
) -> Result<()> {
    let mut mine = Vec::new();
    let mut buffer = vec![0u8; 1 << 16];
    let mut entries: Vec<(std::ffi::CString, FileType)> = Vec::new();
    loop {
        let next = queue
            .lock()
            .map_err(|_| anyhow!("a floor thread panicked"))?
            .pop();
        let Some(dir) = next else {
            if open.load(Ordering::Acquire) == 0 || failed.load(Ordering::Acquire) {
                break;
            }
            std::thread::yield_now();
            continue;
        };
        let listed = (|| -> std::io::Result<_> {
            let mut listing = Dir::new(open_dir(&dir)?)?;
            entries.clear();
            while let Some(entry) = listing.read() {
                let entry = entry?;
                if !matches!(entry.file_name().to_bytes(), b"." | b"..") {
                    entries.push((entry.file_name().to_owned(), entry.file_type()));
                }
            }
            Ok(listing)
        })();
        let listing = listed.with_context(|| format!("listing {}", dir.display()))?;
        let fd = listing.fd()?;
        let mut subdirs = Vec::new();
        for (name, kind) in &entries {
            let path = || {
                dir.join(
                    <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name.to_bytes()),
                )
            };
            let kind = match kind {
                FileType::Unknown => FileType::from_raw_mode(
                    rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW)
                        .with_context(|| format!("looking at {}", path().display()))?
                        .st_mode,
                ),
                known => *known,
            };
            if kind == FileType::Directory {
                let sub = path();
                if name.to_bytes() != b".git" && !how.ignored.contains(&sub) {
                    subdirs.push(sub);
                }
                continue;
            }
            let stat = rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW)
                .with_context(|| format!("looking at {}", path().display()))?;
            if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile {
                if how.read {
                    let file = rustix::fs::openat(
                        fd,
                        name,
                        OFlags::RDONLY | OFlags::CLOEXEC,
                        Mode::empty(),
                    )
                    .with_context(|| format!("opening {}", path().display()))?;
                    while rustix::io::read(&file, &mut buffer)? > 0 {}
                }
                if how.gather {
                    mine.push(path());
                }
            }
        }
        if !subdirs.is_empty() {
            open.fetch_add(subdirs.len(), Ordering::AcqRel);
            queue
                .lock()
                .map_err(|_| anyhow!("a floor thread panicked"))?
                .extend(subdirs);
        }
        open.fetch_sub(1, Ordering::AcqRel);
    }
    found
        .lock()
        .map_err(|_| anyhow!("a floor thread panicked"))?
        .extend(mine);
    Ok(())
}

/// An lstat of each file of `files`, through its open directory, shared by `threads` threads (a re-track
/// whose listings are cached: SPEC 2.4's `track` still looks at every file's stat data).
pub fn lstat(files: &ByDir, threads: usize) -> Result<Duration> {
    let start = Instant::now();
    shared(&files.0, threads, |_, (dir, names)| {
        let fd = open_dir(dir)?;
        for name in names {
            rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW)?;
        }
        Ok(())
    })?;
    Ok(start.elapsed())
}

/// Each of `files` written with its own content and permissions to a new file beside it, then renamed
/// over it, shared by `threads` threads: SPEC 2.5's safe write, as a revert or restore makes one per file
/// (the permissions set when the file is made; changed again only when the umask took some of them). The
/// worktree is unchanged but for the files' inodes and times; a temporary file is removed when its write
/// fails.
pub fn safe_writes(files: &ByDir, threads: usize) -> Result<Duration> {
    let mut jobs = Vec::new();
    for (dir, names) in &files.0 {
        let mut contents = Vec::new();
        for name in names {
            let path = dir.join(name);
            let read =
                std::fs::read(&path).and_then(|content| Ok((content, std::fs::metadata(&path)?)));
            let (content, meta) = read.with_context(|| format!("reading {}", path.display()))?;
            contents.push((
                name.clone(),
                content,
                std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777,
            ));
        }
        jobs.push((dir.clone(), contents));
    }
    let umask = umask();
    let start = Instant::now();
    shared(&jobs, threads, |thread, (dir, files)| {
        let fd = open_dir(dir)?;
        let temp = format!(".rewind-floor-{thread}.tmp");
        for (name, content, permissions) in files {
            let out = rustix::fs::openat(
                &fd,
                temp.as_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
                Mode::from_raw_mode(*permissions),
            )?;
            let written = (|| -> rustix::io::Result<()> {
                let mut written = 0;
                while written < content.len() {
                    written += rustix::io::write(&out, &content[written..])?;
                }
                if permissions & umask != 0 {
                    rustix::fs::fchmod(&out, Mode::from_raw_mode(*permissions))?;
                }
                drop(out);
                rustix::fs::renameat(&fd, temp.as_str(), &fd, name)
            })();
            if let Err(e) = written {
                let _ = rustix::fs::unlinkat(&fd, temp.as_str(), AtFlags::empty());
                return Err(e.into());
            }
        }
        Ok(())
    })?;
    Ok(start.elapsed())
}

/// The process's umask, from `/proc/self/status` (all bits when it cannot be read, so that every floor
/// write sets its permissions again).
fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|mask| u32::from_str_radix(mask.trim(), 8).ok())
        })
        .unwrap_or(0o7777)
}

/// The loose objects of the repository whose objects directory is `objects`, as (fan-out, file name).
pub fn loose_objects(objects: &Path) -> Vec<(String, String)> {
    let mut loose = Vec::new();
    for fan in std::fs::read_dir(objects).into_iter().flatten().flatten() {
        let name = fan.file_name().to_string_lossy().into_owned();
        if name.len() == 2 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
            for object in std::fs::read_dir(fan.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                loose.push((
                    name.clone(),
                    object.file_name().to_string_lossy().into_owned(),
                ));
            }
        }
    }
    loose.sort();
    loose
}

/// What owning `loose` costs at the least (SPEC 2.1 rule 1: every object a snapshot needs is the store's
/// before its id is returned), each way on `threads` threads: a hard link of each into new fan-out
/// directories beside `objects` (made in the timing, removed afterwards), and reading each whole (as
/// writing them into one pack must). Returns (links, reads).
pub fn own_loose(
    objects: &Path,
    loose: &[(String, String)],
    threads: usize,
) -> Result<(Duration, Duration)> {
    let mut by_fan: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (fan, name) in loose {
        by_fan.entry(fan).or_default().push(name);
    }
    let by_fan: Vec<(&str, Vec<&str>)> = by_fan.into_iter().collect();
    let target = tempfile::tempdir_in(objects.parent().unwrap_or(objects))?;
    let start = Instant::now();
    shared(&by_fan, threads, |_, (fan, names)| {
        let from = open_dir(&objects.join(fan))?;
        let to_path = target.path().join(fan);
        rustix::fs::mkdir(&to_path, Mode::from_raw_mode(0o755))?;
        let to = open_dir(&to_path)?;
        for name in names {
            rustix::fs::linkat(&from, *name, &to, *name, AtFlags::empty())?;
        }
        Ok(())
    })?;
    let linked = start.elapsed();
    target.close()?;
    // The links' removal written back before the reads are timed.
    rustix::fs::sync();
    let start = Instant::now();
    shared(&by_fan, threads, |_, (fan, names)| {
        let mut buffer = vec![0u8; 1 << 16];
        let from = open_dir(&objects.join(fan))?;
        for name in names {
            let file = rustix::fs::openat(
                &from,
                *name,
                OFlags::RDONLY | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            while rustix::io::read(&file, &mut buffer)? > 0 {}
        }
        Ok(())
    })?;
    Ok((linked, start.elapsed()))
}

/// `work` done on each of `items`, shared in contiguous runs by `threads` threads (`work` is given the
/// thread's number).
fn shared<T: Sync>(
    items: &[T],
    threads: usize,
    work: impl Fn(usize, &T) -> std::io::Result<()> + Sync,
) -> Result<()> {
    let share = items.len().div_ceil(threads.max(1)).max(1);
    let runs: Vec<&[T]> = items.chunks(share).collect();
    on_threads(runs.len(), |thread| {
        for item in runs[thread] {
            work(thread, item)?;
        }
        Ok(())
    })
}

/// `work` on `threads` threads at once, each given its number; the first error (or panic) is the answer once
/// all have ended.
fn on_threads(threads: usize, work: impl Fn(usize) -> Result<()> + Sync) -> Result<()> {
    std::thread::scope(|scope| -> Result<()> {
        let work = &work;
        let handles: Vec<_> = (0..threads)
            .map(|thread| scope.spawn(move || work(thread)))
            .collect();
        for handle in handles {
            handle
                .join()
                .map_err(|_| anyhow!("a floor thread panicked"))??;
        }
        Ok(())
    })
}
