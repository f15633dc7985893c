//! `track`: walk the worktree under its ignore rules, reuse the blob ids of files whose stat data is
//! unchanged, hash the rest (streamed, in parallel), and write the tree.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use gix::ObjectId;
use rewind_core::model::{SkipReason, SkippedPath};
use rustix::fs::{AtFlags, FileType};

use crate::beneath::Root;
use crate::config::GitStoreConfig;
use crate::error::{GitError, GitResult};
use crate::ignore::{Ignores, dir_rules_hash, read_gitignore};
use crate::odb::{Kind, Odb};
use crate::path_map::{PathMap, StrList};
use crate::seed::Seed;
use crate::stat_cache::{
    CacheEntry, DirStat, Encoded, ListedKind, Listing, Names, Stat, StatCache,
};
use crate::store::{Store, UnheldRules, is_temp_name};
use crate::tree::{Mode, mark_dirty, write_dirty};

/// The result of a track, with what later steps of the same operation need.
#[derive(Debug)]
pub struct Tracked {
    /// The snapshot.
    pub id: ObjectId,
    /// What was left out.
    pub skipped: Vec<SkippedPath>,
    /// How many files were read and hashed.
    pub hashed: u64,
    /// The ignore rules in force (outside rules and the root `.gitignore`).
    pub ignores: Ignores,
}

/// A file the walk listed (a view into `Candidates`).
#[derive(Clone, Copy)]
struct Candidate<'a> {
    rel: &'a str,
    /// Its position among the walk's candidates (where the stat cache, written in walk order, is likely
    /// to hold it).
    at: usize,
    /// Where its name begins in `rel` (the length of its directory's `a/b/` prefix).
    name_at: usize,
}

/// The files the walk listed, in its order, each with where its name begins in its path: their paths one
/// after the other in one string (`StrList`), so a walk of 100,000 files makes no string per file (one
/// allocation each to make and to free: 4 ms of an unchanged re-track's end was freeing them).
#[derive(Default)]
struct Candidates(StrList<usize>);

impl Candidates {
    fn len(&self) -> usize {
        self.0.len()
    }

    /// Adds the file `name` of directory `dir` (`a/b/`, empty at the top).
    fn push(&mut self, dir: &str, name: &str) {
        self.0.push(&[dir, name], dir.len());
    }

    fn iter(&self) -> impl Iterator<Item = Candidate<'_>> {
        self.0
            .iter()
            .enumerate()
            .map(|(at, (rel, name_at))| Candidate { rel, at, name_at })
    }
}

impl Candidate<'_> {
    fn dir(&self) -> &str {
        &self.rel[..self.name_at]
    }

    fn name(&self) -> &str {
        &self.rel[self.name_at..]
    }
}

struct Walk<'a> {
    root: &'a Path,
    /// The worktree's top directory as a handle: listings are read through it, never through a symlink.
    beneath: &'a Root,
    /// Whether to look into `.gitattributes` files (only when a first snapshot may be seeded).
    check_attributes: bool,
    attributes_mention_filters: bool,
    data_dir: Option<&'a Path>,
    /// rewind's own files (`GitStoreConfig::own_files`, canonical), left out as ignored files are.
    own_files: &'a [PathBuf],
    file_cap: usize,
    ignores: Ignores,
    /// The untracked cache of the previous track: its listings, taken out as directories are walked.
    old: StatCache,
    /// The listings of this walk, for the next one.
    listings: HashMap<String, Listing>,
    /// How many directories were read (not answered by the untracked cache) or had their names matched
    /// against changed rules: when none, the untracked cache needs no rewrite.
    relisted: usize,
    /// Whether a listing read again differs from what the old cache held, or would no longer be racy.
    learned_listings: bool,
    /// Whether a listing the old cache held was taken and none stored in its place (the directory, read
    /// again, named something that is not UTF-8): the cache file still holds the old one.
    dropped_listing: bool,
    /// When this track began (the racy rule of the cache it writes).
    started_ns: i128,
    candidates: Candidates,
    skipped: Vec<SkippedPath>,
    /// The nested repositories and hidden `.gitignore` files found, for the snapshot's record.
    unheld: UnheldRules,
    /// `GitStoreConfig::walk_hook`.
    hook: Option<&'a crate::config::ChangeHook>,
    /// Where each directory's files go as they are listed, for other threads to lstat meanwhile (`Feed`).
    feed: Option<std::sync::mpsc::Sender<FedDir>>,
    /// The directories walked whose permission bits lack one of `0755`'s (`a/b/`, with the bits), for the
    /// snapshot's record (`snapshot_modes`).
    dir_modes: Vec<(String, u32)>,
}

/// A directory's files as the walk listed them: where its candidates begin, and their names.
struct FedDir {
    dir: String,
    first: usize,
    names: Vec<String>,
}

/// The lstat of the files a first track that may be seeded lists, taken on the other threads while the walk
/// goes on: there is no cache to look at meanwhile (`Prestat`), and the lstat of every file is most of what
/// a seeded first track costs after its walk. A file looked at here is looked at during
/// the track, as when it is looked at after the walk: `examine` takes this look for its first, and a change
/// after it is the next track's to see, as always.
struct Feed {
    batches: Mutex<std::sync::mpsc::Receiver<FedDir>>,
    /// Set when the walk failed: the directories still queued are not looked at (the track fails).
    stopped: AtomicBool,
}

impl Feed {
    /// Takes the walk's directories until it has ended and none is left; the lstat data found, by
    /// candidate position. A file that cannot be looked at is left to `examine`, which says why.
    fn run(&self, beneath: &Root) -> Vec<(usize, Seen)> {
        let mut open = OpenDir::none();
        let mut seen = Vec::new();
        loop {
            let next = match self.batches.lock() {
                Ok(batches) => batches.recv(),
                Err(_) => break,
            };
            let Ok(batch) = next else { break };
            if self.stopped.load(Ordering::Relaxed) {
                continue;
            }
            let Ok(fd) = open.of(beneath, &batch.dir) else {
                continue;
            };
            for (i, name) in batch.names.iter().enumerate() {
                if let Ok(st) = rustix::fs::statat(fd, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                    seen.push((batch.first + i, Seen::from_rustix(&st)));
                }
            }
        }
        seen
    }
}

/// A directory's entries, the names skipped, the stat data of the directory read, and whether the listing
/// may be cached (`read_listing`).
type ReadListing = (Names, Vec<SkippedPath>, DirStat, bool);

/// Reads a directory's entries: names with their kind, leaving out rewind's temporary files. A `.git` is
/// listed, as ignored (never tracked content): it makes its directory a nested repository's root, walked
/// under that repository's own rules (`Walk::dir`). Names that are not UTF-8 are reported as skipped (a
/// listing that skipped any is not cached; nor is one laid out as a git directory's, whose verdict depends on
/// what its `HEAD` holds, which can change without its directory's), with the stat data of the directory
/// read, taken from its handle before its entries: what the listing is cached with, so the two are always of
/// one directory (the directory found by path may be another: swapped meanwhile, or an automount point whose
/// `lstat` does not mount it). `None` for a sub-directory gone since its parent was listed (`Walk::dir`).
fn read_listing(
    beneath: &Root,
    (abs_dir, rel_dir): (&Path, &str),
) -> GitResult<Option<ReadListing>> {
    use std::os::unix::ffi::OsStrExt;
    let unreadable = |e: std::io::Error| GitError::Unreadable {
        path: if rel_dir.is_empty() {
            ".".to_owned()
        } else {
            rel_dir.trim_end_matches('/').to_owned()
        },
        reason: e.to_string(),
    };
    // Opened below the top with no symlink followed: a directory on the way swapped for a symlink since
    // the walk looked at it is gone, not read where it points.
    let fd = match beneath.dir_for_reading(rel_dir.trim_end_matches('/')) {
        Ok(fd) => fd,
        Err(e) if !rel_dir.is_empty() && crate::beneath::moved(&e) => return Ok(None),
        Err(e) => return Err(unreadable(e)),
    };
    let opened = rustix::fs::fstat(&fd).map_err(|e| unreadable(e.into()))?;
    let stat = DirStat::of_rustix(&opened);
    let entries = rustix::io::dup(&fd)
        .and_then(rustix::fs::Dir::new)
        .map_err(|e| unreadable(e.into()))?;
    let mut listed = Names::default();
    let mut skipped = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| GitError::io(abs_dir, e.into()))?;
        let name = std::ffi::OsStr::from_bytes(entry.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        let Some(name) = name.to_str() else {
            skipped.push(SkippedPath {
                // The directories above are UTF-8, but a `\` of theirs is doubled too: the whole path is
                // in the escaped form, which reads back as one name only.
                path: format!("{}{}", rel_dir.replace('\\', "\\\\"), escaped_name(name)),
                reason: SkipReason::NotUtf8,
            });
            continue;
        };
        if is_temp_name(name) {
            continue;
        }
        // A file system that does not give the type in the listing is asked for it.
        let file_type = match entry.file_type() {
            FileType::Unknown => match rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => FileType::from_raw_mode(stat.st_mode),
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(GitError::io(&abs_dir.join(name), e.into())),
            },
            known => known,
        };
        let kind = match file_type {
            FileType::Directory => ListedKind::Dir,
            FileType::RegularFile | FileType::Symlink => ListedKind::File,
            _ => ListedKind::Special,
        };
        listed.push(name, kind, name == ".git");
    }
    // In the order of the names, not the file system's: btrfs lists a name renamed over another (a
    // revert's write) last, so the same names came in another order, and the listing compared as changed
    // made every track after a revert write the whole cache file (the tests on btrfs).
    listed.sort();
    // A git directory under another name (a bare repository, a `GIT_DIR=.cfg` "dotfiles" repository):
    // like `.git`, never tracked content (git's `HEAD`, `objects/` and `refs/`, looked at further only
    // when the names are there).
    let has =
        |name: &str, kind: ListedKind| listed.iter().any(|l| l.name == name && l.kind == kind);
    let git_layout = !rel_dir.is_empty()
        && has("HEAD", ListedKind::File)
        && has("objects", ListedKind::Dir)
        && has("refs", ListedKind::Dir);
    if git_layout && crate::store::laid_out_as_git_dir(abs_dir) {
        // Said as skipped, so a step that makes or changes one is warned about (review: a bare
        // repository in the project was left out without a word, and its deletion could not be undone).
        let skipped = vec![SkippedPath {
            path: rel_dir.trim_end_matches('/').to_owned(),
            reason: SkipReason::GitDir,
        }];
        return Ok(Some((Names::default(), skipped, stat, false)));
    }
    let cacheable = skipped.is_empty() && !git_layout;
    Ok(Some((listed, skipped, stat, cacheable)))
}

/// A name that is not UTF-8 as reports show it: its valid UTF-8 as it is but for `\`, written `\\`, and
/// each other byte as `\xHH`, so two names that differ only there are told apart (a lossy conversion makes
/// both `\u{fffd}`).
fn escaped_name(name: &std::ffi::OsStr) -> String {
    use std::fmt::Write as _;
    use std::os::unix::ffi::OsStrExt;
    let mut shown = String::new();
    for chunk in name.as_bytes().utf8_chunks() {
        shown.push_str(&chunk.valid().replace('\\', "\\\\"));
        for byte in chunk.invalid() {
            let _ = write!(shown, "\\x{byte:02x}");
        }
    }
    shown
}

impl Walk<'_> {
    /// Walks directory `rel_dir` (`""` or `a/b/`). `rules` hashes the rules on the stack: for the root,
    /// every rule in force for its entries; for a sub-directory, those of its parent (its own `.gitignore`
    /// is read here, when its listing names one, and pushed while its entries are walked).
    fn dir(&mut self, rel_dir: &str, rules: [u8; 20]) -> GitResult<()> {
        let abs_dir = self.root.join(rel_dir);
        let unreadable = |reason: String| GitError::Unreadable {
            path: if rel_dir.is_empty() {
                ".".to_owned()
            } else {
                rel_dir.trim_end_matches('/').to_owned()
            },
            reason,
        };
        if let Some(hook) = self.hook {
            hook(rel_dir);
        }
        // The directory's stat data is taken before it is read: a change after this shows next time.
        // A sub-directory removed or replaced (by a file, a symlink) since its parent was listed (another
        // program at work) is gone from this track, with all it held, as from one taken a moment later:
        // its parent changed, so the next track lists it again. The worktree's own top is never so.
        // The look goes by path (one call, where most directories end: their cached listing stands), so
        // a symlink put in place of a directory above may be followed here; a listing is read through a
        // handle that follows none, and cached with that handle's stat data (`read_listing`): a look
        // that found another directory costs a read next time, never a wrong listing. Without the
        // trailing slash, which would make the kernel follow a symlink put in its own place.
        let meta = match fs::symlink_metadata(self.root.join(rel_dir.trim_end_matches('/'))) {
            Ok(meta) => meta,
            Err(e) if !rel_dir.is_empty() && crate::beneath::moved(&e) => {
                self.gone(rel_dir);
                return Ok(());
            }
            Err(e) => return Err(unreadable(e.to_string())),
        };
        if !meta.is_dir() {
            if !rel_dir.is_empty() {
                self.gone(rel_dir);
                return Ok(());
            }
            return Err(unreadable(
                "it stopped being a directory while the worktree was being read".to_owned(),
            ));
        }
        let mut stat = DirStat::of(&meta);
        let bits = std::os::unix::fs::MetadataExt::mode(&meta) & 0o777;
        if !rel_dir.is_empty() && bits & DIR_PERMISSIONS != DIR_PERMISSIONS {
            self.dir_modes.push((rel_dir.to_owned(), bits));
        }
        let (cached, unusable) = match self.old.take_listing(rel_dir, &stat) {
            Ok(listing) => (Some(listing), None),
            Err(unusable) => (None, unusable.map(|listing| *listing)),
        };
        let cached_rules = cached.as_ref().map(|listing| listing.rules);
        let (mut entries, cacheable) = match cached {
            Some(listing) => (listing.entries, true),
            None => {
                let Some((entries, not_utf8, read, cacheable)) =
                    read_listing(self.beneath, (&abs_dir, rel_dir))?
                else {
                    self.dropped_listing |= unusable.is_some();
                    return Ok(());
                };
                stat = read;
                self.skipped.extend(not_utf8);
                (entries, cacheable)
            }
        };
        let mut pushed = false;
        // The enclosing rules, while a nested repository's own are in force (its root is this directory).
        let mut enclosing = None;
        // This directory's `.gitignore` text (the root's is read with the outside rules).
        let mut text = None;
        let rules = if rel_dir.is_empty() {
            text.clone_from(&self.ignores.root_rules);
            rules
        } else {
            // A missing `.gitignore` is not looked for: the listing says whether there is one.
            if entries.iter().any(|e| e.name == ".gitignore") {
                text = read_gitignore(&abs_dir)?;
            }
            let mut rules = rules;
            if entries.iter().any(|e| e.name == ".git")
                && let Some(exclude) = crate::ignore::nested_repository_exclude(&abs_dir)?
            {
                self.unheld
                    .nested
                    .insert(rel_dir.trim_end_matches('/').to_owned(), exclude.clone());
                rules = self.ignores.nested_rules_hash(rel_dir, exclude.as_deref());
                let nested = self.ignores.nested(rel_dir, exclude.as_deref());
                enclosing = Some(std::mem::replace(&mut self.ignores, nested));
            }
            pushed = self.ignores.push_dir(rel_dir, text.as_deref());
            dir_rules_hash(&rules, rel_dir, text.as_deref())
        };
        // Which names are ignored is reused only from a listing matched under the same rules: the whole
        // listing when it is still valid; when the directory changed, each name that was there before with
        // the same kind (what it matches depends only on its path, its kind and the rules).
        let matched = cached_rules == Some(rules);
        let before: HashMap<&str, (ListedKind, bool)> = match &unusable {
            Some(old) if !matched && old.rules == rules => old
                .entries
                .iter()
                .map(|e| (e.name, (e.kind, e.ignored)))
                .collect(),
            _ => HashMap::new(),
        };
        let result = self.entries(rel_dir, &abs_dir, &mut entries, rules, matched, &before);
        // A `.gitignore` whose rules are in force but that is left out (ignored by them, or by rules
        // above): the snapshot does not hold its text, so its record does.
        if entries
            .iter()
            .any(|e| e.name == ".gitignore" && e.kind == ListedKind::File && e.ignored)
            && let Some(text) = text
        {
            self.unheld
                .hidden
                .insert(rel_dir.trim_end_matches('/').to_owned(), text);
        }
        if pushed {
            self.ignores.pop();
        }
        if let Some(enclosing) = enclosing {
            self.ignores = enclosing;
        }
        result?;
        if cacheable {
            let listing = Listing {
                stat,
                rules,
                entries,
            };
            // A listing read again teaches the next track something unless it holds what the old one held
            // and would be racy again (a directory changed within the last second, e.g. by a revert's
            // writes, which changed its times and not its names): the next track reads it again either
            // way.
            let same_and_racy_again = unusable
                .as_ref()
                .is_some_and(|old| old.rules == listing.rules && old.entries == listing.entries)
                && StatCache::listing_stays_racy(&listing, self.started_ns);
            if !matched && !same_and_racy_again {
                self.learned_listings = true;
            }
            self.listings.insert(rel_dir.to_owned(), listing);
        } else if unusable.is_some() {
            self.dropped_listing = true;
        }
        Ok(())
    }

    /// What the walk keeps of a sub-directory gone since its parent was listed: no listing, so the old
    /// one (if any) is dropped and the next track reads the directory again, should it be back.
    fn gone(&mut self, rel_dir: &str) {
        if self.old.listings.remove(rel_dir).is_some() {
            self.dropped_listing = true;
        }
    }

    /// Matches the entries of `rel_dir` against the rules (unless the cached listing was matched under the
    /// same rules) and walks them.
    fn entries(
        &mut self,
        rel_dir: &str,
        abs_dir: &Path,
        entries: &mut Names,
        rules: [u8; 20],
        matched: bool,
        before: &HashMap<&str, (ListedKind, bool)>,
    ) -> GitResult<()> {
        if !matched {
            self.relisted += 1;
            for at in 0..entries.len() {
                let Some(entry) = entries.get(at) else {
                    continue;
                };
                let ignored = if entry.name == ".git" {
                    true
                } else if let Some((kind, ignored)) = before.get(entry.name)
                    && *kind == entry.kind
                {
                    *ignored
                } else {
                    let rel = joined(rel_dir, entry.name, "");
                    match entry.kind {
                        ListedKind::Dir => {
                            self.data_dir.is_some_and(|d| d == abs_dir.join(entry.name))
                                || self.ignores.is_ignored(&rel, true)
                        }
                        _ => {
                            self.own_files
                                .iter()
                                .any(|f| f.parent() == Some(abs_dir) && f.ends_with(entry.name))
                                || self.ignores.is_ignored(&rel, false)
                        }
                    }
                };
                entries.set_ignored(at, ignored);
            }
        }
        // Files first, then sub-directories: a directory's candidates are next to each other, so each
        // worker that examines them opens the directory once.
        let first = self.candidates.len();
        let mut fed = Vec::new();
        for entry in entries.iter() {
            // git applies an ignored `.gitattributes` too: it is checked before the ignore rules apply.
            if self.check_attributes
                && entry.kind == ListedKind::File
                && entry.name == ".gitattributes"
            {
                self.attributes_mention_filters |=
                    crate::seed::file_mentions_filters(&abs_dir.join(entry.name));
            }
            if entry.ignored {
                continue;
            }
            match entry.kind {
                ListedKind::Dir => {}
                ListedKind::File => {
                    if self.feed.is_some() {
                        fed.push(entry.name.to_owned());
                    }
                    self.candidates.push(rel_dir, entry.name);
                    if self.candidates.len() > self.file_cap {
                        return Err(GitError::Refused(format!(
                            "the worktree {} has more than {} files (the file-count cap); refusing to snapshot it: \
                             ignore what need not be undone (a `.gitignore` for generated directories), or raise \
                             the cap (`--file-cap`, `REWIND_FILE_CAP`)",
                            self.root.display(),
                            self.file_cap
                        )));
                    }
                }
                ListedKind::Special => self.skipped.push(SkippedPath {
                    path: joined(rel_dir, entry.name, ""),
                    reason: SkipReason::Special,
                }),
            }
        }
        if let Some(feed) = &self.feed
            && !fed.is_empty()
        {
            // A feed whose threads have ended (one panicked) leaves these files to `examine`.
            let _ = feed.send(FedDir {
                dir: rel_dir.to_owned(),
                first,
                names: fed,
            });
        }
        for entry in entries.iter() {
            if entry.kind == ListedKind::Dir && !entry.ignored {
                self.dir(&joined(rel_dir, entry.name, "/"), rules)?;
            }
        }
        Ok(())
    }
}

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

/// What each candidate turned out to be.
enum Outcome {
    /// Its blob, and whether it was read and hashed.
    Tracked(Stat, ObjectId, bool),
    /// Its blob as the user's index records it (to be adopted into the store), and whether the file was
    /// read and hashed to confirm it (its stat data was not believed).
    Seeded(Stat, ObjectId, bool),
    Skipped(SkippedPath),
    Gone,
}

/// Tracks the worktree of `store`.
pub fn track(store: &Store, config: &GitStoreConfig) -> GitResult<Tracked> {
    // The objects this track adds are written together, as one pack, before anything names them (`finish`).
    store.odb.batched(|| track_batched(store, config))
}

fn track_batched(store: &Store, config: &GitStoreConfig) -> GitResult<Tracked> {
    let started_ns = now_ns();
    let root = store.worktree.as_path();
    let ignores = Ignores::for_worktree(root, &config.excludes_file, config.home_dir.as_deref())?;
    let data_dir = fs::canonicalize(&config.data_dir).ok();
    let own_files = crate::config::canonical_own_files(&config.own_files);
    let (mut cache, pending) = StatCache::load_deferred(&store.stat_cache_path());
    let cached_files = pending
        .as_ref()
        .map_or(cache.entries.positions(), |p| p.count() as usize);
    let may_seed = cached_files == 0 && ignores.enclosing.is_some();
    let beneath = store.root()?;
    let mut walk = Walk {
        root,
        beneath: &beneath,
        check_attributes: may_seed,
        attributes_mention_filters: false,
        data_dir: data_dir.as_deref(),
        own_files: &own_files,
        file_cap: config.file_cap,
        ignores: ignores.clone(),
        old: StatCache {
            started_ns: cache.started_ns,
            listings: std::mem::take(&mut cache.listings),
            ..StatCache::default()
        },
        listings: HashMap::new(),
        relisted: 0,
        learned_listings: false,
        dropped_listing: false,
        started_ns,
        candidates: Candidates::default(),
        skipped: Vec::new(),
        unheld: UnheldRules::default(),
        hook: config.walk_hook.as_ref(),
        feed: None,
        dir_modes: Vec::new(),
    };
    // While this thread walks, the others lstat the files the cache holds, in its order: the walk is
    // mostly this process's own work and the lstat calls mostly the kernel's, and each would otherwise
    // leave a core idle (a re-track of 100,000 unchanged files is one walk and 100,000 lstat calls).
    // The cache's entries, read from its file, are parsed by the first thread that needs them, while
    // this one parses the listings and walks.
    let prestat = Prestat::new(if may_seed { 0 } else { cached_files });
    let odd_modes = OddModes::default();
    // A first track that may be seeded: with nothing cached to look at meanwhile, the other threads lstat
    // what the walk lists (a first track that hashes every file is bound by reading them instead, and
    // measured no faster so).
    let feed = (may_seed && worker_threads() > 1).then(|| {
        let (sender, batches) = std::sync::mpsc::channel();
        walk.feed = Some(sender);
        Feed {
            batches: Mutex::new(batches),
            stopped: AtomicBool::new(false),
        }
    });
    let rules = ignores.root_rules_hash(data_dir.as_deref(), &own_files);
    let parsed = OnceLock::new();
    if pending.is_none() {
        let _ = parsed.set(Some(std::mem::take(&mut cache.entries)));
    }
    let entries = || {
        parsed
            .get_or_init(|| pending.as_ref().and_then(|p| p.parse()))
            .as_ref()
    };
    let cache_started_ns = cache.started_ns;
    let (walked, seed, early, trusted) = std::thread::scope(|scope| {
        // A first track that may be seeded reads the user's index on another thread while this one walks
        // (nothing is cached to look at meanwhile); the walk's attributes files decide afterwards whether
        // it is used.
        let seeding = match (&ignores.enclosing, may_seed) {
            (Some(repo), true) => Some(scope.spawn(|| Seed::load(repo, ignores.prefix()))),
            _ => None,
        };
        let looking: Vec<_> = match &feed {
            Some(feed) => (1..worker_threads())
                .map(|_| scope.spawn(|| feed.run(&beneath)))
                .collect(),
            None => Vec::new(),
        };
        for _ in 1..worker_threads() {
            scope.spawn(|| {
                if let Some(entries) = entries() {
                    prestat.run(&beneath, entries, cache_started_ns, &odd_modes);
                    // A file is to be hashed: the store's pack indexes, which say whether its blob is
                    // stored already, are opened now rather than when the walk has ended.
                    if prestat.found_to_hash() {
                        store.odb.open_packs_now();
                    }
                }
            });
        }
        // The cache's listings are parsed here, while another thread parses its entries (a re-track of
        // 100,000 files: 8 ms each). Listings that do not parse leave nothing of the file trusted, as
        // entries that do not: the walk reads every directory, and the lstat data is not used.
        let trusted = match &pending {
            Some(pending) => match pending.listings() {
                Some(listings) => {
                    walk.old.listings = listings;
                    true
                }
                None => {
                    prestat.stop();
                    false
                }
            },
            None => true,
        };
        // The feed's threads wait for the walk's sender to go: it goes when the walk ends, also by a panic
        // (review: the scope waited for them for ever, the panic never surfaced, and the store stayed
        // locked), which is raised again once it has gone.
        let walked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| walk.dir("", rules)));
        walk.feed = None;
        if let (Some(feed), false) = (&feed, matches!(walked, Ok(Ok(())))) {
            feed.stopped.store(true, Ordering::Relaxed);
        }
        let walked = walked.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        match walked
            .as_ref()
            .ok()
            .filter(|()| trusted)
            .and_then(|()| entries())
        {
            Some(entries) => prestat.run(&beneath, entries, cache_started_ns, &odd_modes),
            None => prestat.stop(),
        }
        // The walk has ended: this thread helps take what it listed last.
        let mut early: Vec<Option<Seen>> = Vec::new();
        if let (Some(feed), true) = (&feed, walked.is_ok()) {
            early.resize(walk.candidates.len(), None);
            let own = feed.run(&beneath);
            // A thread that panicked looked at nothing: `examine` looks at its files.
            let theirs = looking.into_iter().filter_map(|l| l.join().ok());
            for (at, seen) in theirs.flatten().chain(own) {
                if let Some(slot) = early.get_mut(at) {
                    *slot = Some(seen);
                }
            }
        }
        // A thread that panicked seeds nothing: every file is hashed.
        let seed = seeding.and_then(|loading| loading.join().ok().flatten());
        (walked, seed, early, trusted)
    });
    walked?;
    match parsed.into_inner() {
        Some(Some(entries)) if trusted => cache.entries = entries,
        // The checksum held and the entries or the listings did not parse: nothing of the file is trusted.
        // Without a tree or entries the new cache is saved whole, with this track's generation and start
        // time, so the file's are not used either.
        _ => {
            cache.tree = None;
            cache.dirs.clear();
        }
    }
    let seed = seed.filter(|_| !walk.attributes_mention_filters);
    let Walk {
        candidates,
        mut skipped,
        listings,
        relisted,
        learned_listings,
        unheld,
        old,
        dropped_listing,
        dir_modes,
        ..
    } = walk;
    odd_modes.add(dir_modes);
    // This walk's listings stand for every listing the cache file holds: the walk took each one the cache
    // held and stored one in its place, and the cache held all of its file's. Otherwise a listing stays
    // in the file that this walk did not look at again, which a track's start time must not move past
    // (`StatCache::save_in_place`).
    let listings_as_file = old.listings.is_empty() && !dropped_listing && !cache.listings_partial;
    // Aligned: the walk found the cache's paths, at its positions, and no other.
    let reusable = cache.tree.is_some() && cache.dirs.contains_key("");
    let aligned = reusable
        && !may_seed
        && candidates.len() == cache.entries.positions()
        && candidates
            .iter()
            .all(|c| cache.entries.holds_at(c.at, c.rel));
    if aligned {
        let unanswered: Vec<Candidate<'_>> = candidates
            .iter()
            .filter(|c| !prestat.was_fresh(c.at))
            .collect();
        let listings_learned = relisted > 0 && learned_listings;
        // Only the files not found as cached during the walk (often none) are looked at again; their
        // entries are replaced in place. A file that vanished, or turned into something that is not
        // tracked, takes the general way below. Most of them are hashed (files written within the last
        // second, by the user or a revert): worth a thread each from a few files on.
        let misplaced = AtomicUsize::new(0);
        let outcomes = parallel_map_on(
            &unanswered,
            worker_threads(),
            EXAMINE_IN_PARALLEL_FROM,
            || Worker::new(&beneath, &misplaced, &odd_modes),
            |worker, candidate| examine(store, config, &cache, None, worker, (candidate, None)),
        )?;
        if outcomes.iter().all(|o| matches!(o, Outcome::Tracked(..))) {
            let mut in_place =
                InPlace::new(std::mem::take(&mut cache.entries), reusable, started_ns);
            for (candidate, outcome) in unanswered.into_iter().zip(outcomes) {
                if let Outcome::Tracked(stat, id, was_hashed) = outcome {
                    in_place.set(
                        candidate.at,
                        candidate.rel,
                        CacheEntry { stat, id },
                        was_hashed,
                    );
                }
            }
            let found = Found {
                skipped,
                hashed: in_place.hashed,
                listings,
                listings_learned,
                listings_as_file,
                unheld,
                odd_modes: odd_modes.take(),
            };
            return finish(
                store,
                cache,
                in_place.done(false),
                found,
                started_ns,
                ignores,
            );
        }
    }
    // One view per file from here on: the threads share them out as a slice.
    let candidates: Vec<Candidate<'_>> = candidates.iter().collect();
    let misplaced = AtomicUsize::new(0);
    let outcomes = parallel_map_with(
        &candidates,
        || Worker::new(&beneath, &misplaced, &odd_modes),
        |worker, candidate| {
            // Answered by the lstat taken during the walk, when the cache holds the path where the
            // worker expects it.
            let hint = worker.hint(candidate);
            if prestat.was_fresh(hint)
                && let Some((path, entry)) = cache.entries.at(hint)
                && path == candidate.rel
            {
                return Ok(Outcome::Tracked(entry.stat, entry.id, false));
            }
            let first_look = early.get(candidate.at).copied().flatten();
            examine(
                store,
                config,
                &cache,
                seed.as_ref(),
                worker,
                (candidate, first_look),
            )
        },
    )?;
    // A cache whose order is far from the walk's (written by an older version, or after many files moved)
    // is written again in walk order, so later tracks find each path where they look first.
    let misordered = misplaced.into_inner() > cache.entries.len() / 8 + 16;
    let outcomes = adopt_seeded(
        store,
        config,
        (&cache, &beneath),
        seed.as_ref(),
        &candidates,
        outcomes,
    )?;
    // Unchanged since the cached snapshot: every file answered by the stat cache, or hashed again (racy)
    // with the cache's stat data and blob and still racy in a cache this track would write, and as many
    // files as it holds (each answer is for a distinct cached path, so the path sets are equal). The cached
    // tree is the snapshot; nothing is written (a new cache would answer the next track no better).
    let as_cached = |candidate: &Candidate, outcome: &Outcome| match outcome {
        Outcome::Tracked(_, _, false) => true,
        Outcome::Tracked(stat, id, true) => cache
            .entries
            .get_near(candidate.at, candidate.rel)
            .is_some_and(|(_, e)| e.id == *id && e.stays_racy(stat, started_ns)),
        _ => false,
    };
    let mut fresh = 0;
    let mut all_fresh = true;
    let mut hashed = 0;
    for (candidate, outcome) in candidates.iter().zip(&outcomes) {
        hashed += u64::from(matches!(
            outcome,
            Outcome::Tracked(_, _, true) | Outcome::Seeded(_, _, true)
        ));
        if as_cached(candidate, outcome) {
            fresh += 1;
        } else if !matches!(outcome, Outcome::Skipped(_)) {
            all_fresh = false;
        }
    }
    if reusable && all_fresh && fresh == cache.entries.len() && !misordered {
        for outcome in outcomes {
            if let Outcome::Skipped(skip) = outcome {
                skipped.push(skip);
            }
        }
        let found = Found {
            skipped,
            hashed,
            listings,
            listings_learned: relisted > 0 && learned_listings,
            listings_as_file,
            unheld,
            odd_modes: odd_modes.take(),
        };
        // Each file hashed again stays racy (`as_cached`), and no entry changes.
        let in_place = InPlace::new(std::mem::take(&mut cache.entries), reusable, started_ns);
        return finish(
            store,
            cache,
            in_place.done(false),
            found,
            started_ns,
            ignores,
        );
    }
    // Only the trees of directories where something changed since the cached snapshot are written again:
    // paths whose entry differs from the cache's, and paths the cache has that are gone. Without a cached
    // tree every directory is written.
    if same_paths(&cache.entries, &candidates, &outcomes) {
        // The files of the cache, in its order (files changed, none came or went, some may be skipped):
        // its entries are updated in place.
        let mut in_place = InPlace::new(std::mem::take(&mut cache.entries), reusable, started_ns);
        let mut at = 0;
        for (candidate, outcome) in candidates.iter().zip(outcomes) {
            let (entry, was_hashed) = match outcome {
                Outcome::Tracked(stat, id, was_hashed) => (CacheEntry { stat, id }, was_hashed),
                // A file read to confirm a seeded blob is counted (`hashed`), not weighed as a racy entry.
                Outcome::Seeded(stat, id, _) => (CacheEntry { stat, id }, false),
                Outcome::Skipped(skip) => {
                    skipped.push(skip);
                    continue;
                }
                Outcome::Gone => continue,
            };
            in_place.set(at, candidate.rel, entry, was_hashed);
            at += 1;
        }
        let found = Found {
            skipped,
            hashed,
            listings,
            listings_learned: relisted > 0 && learned_listings,
            listings_as_file,
            unheld,
            odd_modes: odd_modes.take(),
        };
        return finish(
            store,
            cache,
            in_place.done(misordered),
            found,
            started_ns,
            ignores,
        );
    }
    // Whether every file hashed again had the cache's stat data and would still be racy in a cache this
    // track wrote (files written within the last second, e.g. by a revert): then a new cache would hold
    // the same entries and answer the next track no better, and is not written.
    let mut hashed_stay_racy = true;
    let mut dirty = HashSet::new();
    let mut entries = PathMap::with_capacity(outcomes.len(), outcomes.len() * 48);
    for (candidate, outcome) in candidates.into_iter().zip(outcomes) {
        match outcome {
            Outcome::Tracked(stat, id, was_hashed) => {
                if was_hashed {
                    hashed_stay_racy &= cache
                        .entries
                        .get_near(candidate.at, candidate.rel)
                        .is_some_and(|(_, b)| b.stays_racy(&stat, started_ns));
                }
                entries.push_new(candidate.rel, CacheEntry { stat, id });
            }
            Outcome::Seeded(stat, id, _) => {
                entries.push_new(candidate.rel, CacheEntry { stat, id });
            }
            Outcome::Skipped(skip) => skipped.push(skip),
            Outcome::Gone => {}
        }
    }
    // Both are in walk order: each path is looked for first just after the one before it.
    let mut hint = 0;
    let mut still_cached = 0;
    for (path, entry) in entries.iter() {
        match cache.entries.get_near(hint, path) {
            Some((at, before)) => {
                hint = at + 1;
                still_cached += 1;
                if !reusable || (before.stat.mode, before.id) != (entry.stat.mode, entry.id) {
                    mark_dirty(&mut dirty, path);
                }
            }
            None => mark_dirty(&mut dirty, path),
        }
    }
    if still_cached < cache.entries.len() {
        for (path, _) in cache
            .entries
            .iter()
            .filter(|(p, _)| !entries.contains_key(p))
        {
            mark_dirty(&mut dirty, path);
        }
    }
    let found = Found {
        skipped,
        hashed,
        listings,
        listings_learned: relisted > 0 && learned_listings,
        listings_as_file,
        unheld,
        odd_modes: odd_modes.take(),
    };
    let changed = Changed {
        entries,
        dirty,
        hashed_stay_racy,
        reusable,
        misordered,
        in_place: None,
    };
    finish(store, cache, changed, found, started_ns, ignores)
}

/// What a track found, besides its files' blobs.
struct Found {
    skipped: Vec<SkippedPath>,
    hashed: u64,
    /// The listings of the directories walked.
    listings: HashMap<String, Listing>,
    /// Whether they teach the next track something (see `Walk::learned_listings`).
    listings_learned: bool,
    /// Whether the listings stand for every listing the cache file holds (see `track_batched`).
    listings_as_file: bool,
    unheld: UnheldRules,
    /// The files looked at whose permission bits a new file would not get (`OddModes`).
    odd_modes: Vec<(String, u32)>,
}

/// The files a track found, as the entries of the cache it leaves, and what differs from `cache`.
struct Changed {
    entries: PathMap<CacheEntry>,
    /// The directories whose trees are to be written again.
    dirty: HashSet<String>,
    /// Whether every file hashed again had the cache's stat data and would still be racy in a cache this
    /// track wrote (files written within the last second, e.g. by a revert): then a new cache would hold
    /// the same entries and answer the next track no better.
    hashed_stay_racy: bool,
    /// Whether the cache's trees can be reused.
    reusable: bool,
    /// Whether the cache is to be written again in walk order.
    misordered: bool,
    /// The paths whose entries were replaced in place, when no path came or went (`InPlace`).
    in_place: Option<Vec<String>>,
}

/// The cache's entries replaced in place, by a track that found the cache's paths at its positions.
struct InPlace {
    entries: PathMap<CacheEntry>,
    dirty: HashSet<String>,
    /// The paths whose entries changed (stat data or blob).
    changed: Vec<String>,
    /// How many files were read and hashed.
    hashed: u64,
    hashed_stay_racy: bool,
    reusable: bool,
    started_ns: i128,
}

impl InPlace {
    fn new(entries: PathMap<CacheEntry>, reusable: bool, started_ns: i128) -> InPlace {
        InPlace {
            entries,
            dirty: HashSet::new(),
            changed: Vec::new(),
            hashed: 0,
            hashed_stay_racy: true,
            reusable,
            started_ns,
        }
    }

    /// Puts `entry`, found for `rel` (read and hashed when `was_hashed`), at position `at`.
    fn set(&mut self, at: usize, rel: &str, entry: CacheEntry, was_hashed: bool) {
        let before = self.entries.set_at(at, entry);
        if before != Some(entry) {
            self.changed.push(rel.to_owned());
        }
        self.hashed += u64::from(was_hashed);
        if was_hashed {
            self.hashed_stay_racy &= before
                .as_ref()
                .is_some_and(|b| b.stays_racy(&entry.stat, self.started_ns));
        }
        if !self.reusable
            || before.is_none_or(|b| (b.stat.mode, b.id) != (entry.stat.mode, entry.id))
        {
            mark_dirty(&mut self.dirty, rel);
        }
    }

    fn done(self, misordered: bool) -> Changed {
        Changed {
            entries: self.entries,
            dirty: self.dirty,
            hashed_stay_racy: self.hashed_stay_racy,
            reusable: self.reusable,
            misordered,
            in_place: Some(self.changed),
        }
    }
}

/// Ends a track: writes the trees of the dirty directories and the new cache, unless nothing changed
/// that the next track would profit from (then the cached tree is the snapshot and nothing is written).
fn finish(
    store: &Store,
    mut cache: StatCache,
    changed: Changed,
    found: Found,
    started_ns: i128,
    ignores: Ignores,
) -> GitResult<Tracked> {
    let Changed {
        entries,
        dirty,
        hashed_stay_racy,
        reusable,
        misordered,
        in_place,
    } = changed;
    let Found {
        mut skipped,
        hashed,
        listings,
        listings_learned,
        listings_as_file,
        unheld,
        odd_modes,
    } = found;
    skipped.sort_by(|a, b| a.path.cmp(&b.path));
    let modes = snapshot_modes(odd_modes, &entries);
    // Every directory walked has a listing (one with a name that is not UTF-8 has none, and is not empty).
    let empty_dirs: BTreeSet<String> = listings
        .iter()
        .filter(|(dir, listing)| !dir.is_empty() && listing.entries.is_empty())
        .map(|(dir, _)| dir.trim_end_matches('/').to_owned())
        .collect();
    let unchanged = reusable
        && !misordered
        && dirty.is_empty()
        && !listings_learned
        && (hashed == 0 || hashed_stay_racy);
    if unchanged && let Some(tree) = cache.tree {
        // Before the cache or the returned log name any of them, the objects of this track are written.
        store.odb.end_batch()?;
        // What the file holds, but for the listings of directories not walked this time.
        StatCache {
            listings,
            entries,
            listings_partial: !listings_as_file,
            ..cache
        }
        .keep(&store.stat_cache_path());
        return returned(
            store,
            tree,
            (skipped, &empty_dirs, &unheld, &modes),
            hashed,
            ignores,
        );
    }
    // A few entries replaced in place (no path came or went) go to the cache's side file rather than a
    // whole new file (9 MB at 100,000 files), when the walk's listings stand for the file's: none learned,
    // and every one the file holds looked at again (`listings_as_file`: the side file moves the start time
    // forward, which a listing not looked at again must not be judged by).
    let side = match &in_place {
        Some(paths) if reusable && !misordered && !listings_learned && listings_as_file => {
            cache.side_since(paths, &dirty, entries.len())
        }
        _ => None,
    };
    // Otherwise the new cache's entries and listings are encoded on another thread while this one writes
    // the trees.
    let (written, encoded) = std::thread::scope(|scope| {
        let encoding = side
            .is_none()
            .then(|| scope.spawn(|| Encoded::of(&entries, &listings)));
        let written = match cache.tree {
            // No directory changed (only listings, the order, or files still racy): the cache's trees
            // stay. Its start time moves forward, which leaves every unchanged entry as it was: one found
            // as cached last changed (mtime or ctime) before the old start time less the margin, so before
            // the new one too; one hashed again and found as cached stays racy under the new start time.
            Some(tree) if reusable && dirty.is_empty() => Ok((tree, cache.dirs)),
            _ => {
                let no_dirs = HashMap::new();
                let old_dirs = if reusable { &cache.dirs } else { &no_dirs };
                let files = entries
                    .iter()
                    .map(|(path, entry)| (path, (entry.stat.mode, entry.id)));
                write_dirty(&store.odb, files, old_dirs, &dirty)
            }
        };
        (written, encoding.and_then(|encoding| encoding.join().ok()))
    });
    let (id, dirs) = written?;
    store.odb.end_batch()?;
    let cache = StatCache {
        generation: 0,
        started_ns,
        tree: Some(id),
        entries,
        dirs,
        listings,
        // Whole, the file holds these listings; to the side file, they stand for the file's.
        listings_partial: false,
        since_file: None,
    };
    // The cache only saves work: when it cannot be written (a full disk), the file keeps the cache it
    // held, which the next track checks file by file like any other, and whose tree gc keeps. The
    // snapshot stands (its objects are written); failing here would fail, say, the rollback of an
    // operation on a full disk, whose files need nothing new stored (black-box).
    let _unsaved = match side {
        Some(since) => cache.save_in_place(&store.stat_cache_path(), since),
        None => {
            // A thread that panicked encoded nothing: this one does it.
            let encoded = encoded.unwrap_or_else(|| Encoded::of(&cache.entries, &cache.listings));
            cache.save_encoded(&store.stat_cache_path(), encoded)
        }
    };
    returned(
        store,
        id,
        (skipped, &empty_dirs, &unheld, &modes),
        hashed,
        ignores,
    )
}

/// The permission bits of the snapshot's files that are private beyond git's modes, from the track's looks
/// (`OddModes`): only files the snapshot holds, as a file or an executable as it holds them; a file looked
/// at twice (a cached look, then a look before hashing it) has the bits of the narrower look. Directories
/// walked whose bits lack one of `0755`'s too, as `a/b/`. At most `MAX_RECORDED_MODES`, the most private
/// first (no read bit for others, then none for the group).
fn snapshot_modes(odd: Vec<(String, u32)>, entries: &PathMap<CacheEntry>) -> BTreeMap<String, u32> {
    let mut modes: BTreeMap<String, u32> = BTreeMap::new();
    for (path, bits) in odd {
        // A directory (`a/b/`) is kept as the walk saw it: the record is asked about the directories a
        // write makes, which are the snapshot's.
        let held = path.ends_with('/')
            || entries
                .get(&path)
                .is_some_and(|entry| bits_fit(bits, entry.stat.mode));
        if held {
            *modes.entry(path).or_insert(bits) &= bits;
        }
    }
    if modes.len() > MAX_RECORDED_MODES {
        let mut ranked: Vec<(String, u32)> = modes.into_iter().collect();
        ranked.sort_by_key(|(path, bits)| (bits & 0o004 != 0, bits & 0o040 != 0, path.clone()));
        ranked.truncate(MAX_RECORDED_MODES);
        modes = ranked.into_iter().collect();
    }
    modes
}

/// Whether recorded permission `bits` fit a file of `mode`: executable bits for an executable, none for a
/// plain file, and no bits at all for a symlink or a directory entry.
pub(crate) fn bits_fit(bits: u32, mode: Mode) -> bool {
    match mode {
        Mode::File => bits & 0o100 == 0,
        Mode::Exec => bits & 0o100 != 0,
        Mode::Link | Mode::Tree => false,
    }
}

/// How many files' permission bits a snapshot's record keeps at most (`snapshot_modes`).
const MAX_RECORDED_MODES: usize = 10_000;

/// A directory's permission bits when nothing more private is said (`Walk::dir_modes`).
pub(crate) const DIR_PERMISSIONS: u32 = 0o755;

/// git's modes as permission bits: what a file or an executable has when nothing more private is said.
pub(crate) fn canonical_permissions(executable: bool) -> u32 {
    if executable { 0o755 } else { 0o644 }
}

/// The permission bits of the files a track looks at that are private beyond git's modes (they lack a bit
/// `0644` or `0755` has: a read bit for the group or others, the owner's write): the snapshot's record
/// keeps them (`SnapshotRecord::modes`), and a file brought back where none stands gets them, less what
/// the umask takes from a new file (`apply::new_file_permissions`): a private key a step deleted comes back
/// private, and no file comes back more open than it was or than a new file is. Measured against git's
/// modes, not the umask, so the record says the same whatever the umask of the process that tracked (a
/// tree checked out under umask 002, all 0644, records nothing). Each thread notes its looks in a buffer
/// of its own (`Worker::odd`, `Prestat::run`), handed over here once.
#[derive(Default)]
struct OddModes(Mutex<Vec<(String, u32)>>);

/// Whether a look at a file saw bits to record (`OddModes`): the bits when it did.
fn private_bits(seen: &Seen) -> Option<u32> {
    match seen.kind {
        SeenKind::File { executable }
            if canonical_permissions(executable) & !seen.permissions != 0 =>
        {
            Some(seen.permissions)
        }
        _ => None,
    }
}

impl OddModes {
    fn add(&self, mut noted: Vec<(String, u32)>) {
        if noted.is_empty() {
            return;
        }
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .append(&mut noted);
    }

    fn take(&self) -> Vec<(String, u32)> {
        std::mem::take(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// Records snapshot `id` (with what it skipped, the empty directories and the nested repositories it saw)
/// as returned, and returns it.
fn returned(
    store: &Store,
    id: ObjectId,
    (skipped, empty_dirs, unheld, modes): (
        Vec<SkippedPath>,
        &BTreeSet<String>,
        &UnheldRules,
        &BTreeMap<String, u32>,
    ),
    hashed: u64,
    ignores: Ignores,
) -> GitResult<Tracked> {
    let skipped_set: BTreeSet<String> = skipped.iter().map(|s| s.path.clone()).collect();
    store.add_record(
        &id,
        ignores.prefix(),
        &ignores.outside,
        (&skipped_set, empty_dirs, modes),
        unheld,
    )?;
    store.log_returned(&id)?;
    Ok(Tracked {
        id,
        skipped,
        hashed,
        ignores,
    })
}

/// Whether the files a track found are those of `cached`, at the same positions: the candidates that are
/// files (neither skipped nor gone) hold the cache's paths in its order, and it has no other position.
fn same_paths(
    cached: &PathMap<CacheEntry>,
    candidates: &[Candidate],
    outcomes: &[Outcome],
) -> bool {
    let mut at = 0;
    for (candidate, outcome) in candidates.iter().zip(outcomes) {
        if matches!(outcome, Outcome::Tracked(..) | Outcome::Seeded(..)) {
            if !cached.holds_at(at, candidate.rel) {
                return false;
            }
            at += 1;
        }
    }
    at == cached.positions()
}

/// Makes the store own the blobs seeded from the user's index; files whose blob could not be adopted are
/// hashed from disk instead, and so are files whose blob's size is not the file's: the blob was made under
/// other settings or attributes than now (`core.autocrlf` switched off since, a `.gitattributes` gone since,
/// a branch switched), or the user's object is damaged. A filter that keeps sizes is caught by the
/// attributes check before (`Seed::load`).
fn adopt_seeded(
    store: &Store,
    config: &GitStoreConfig,
    (cache, beneath): (&StatCache, &Root),
    seed: Option<&Seed>,
    candidates: &[Candidate],
    mut outcomes: Vec<Outcome>,
) -> GitResult<Vec<Outcome>> {
    let Some(seed) = seed else {
        return Ok(outcomes);
    };
    let wanted: gix::hashtable::HashSet = outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Seeded(_, id, _) => Some(*id),
            _ => None,
        })
        .collect();
    if wanted.is_empty() {
        return Ok(outcomes);
    }
    let adopted = seed.adopt(&store.odb, &wanted);
    // The blobs of the linked packs are sized from the packs' entry headers (`pack_header`); the rest
    // (loose objects, or anything a pack could not answer for) through the store.
    let mut size_of: gix::hashtable::HashMap<ObjectId, u64> = Default::default();
    let mut rest: Vec<ObjectId> = adopted.owned.into_iter().collect();
    for idx in &adopted.packs {
        if let Ok(sizes) = crate::pack_header::blob_sizes(idx, &rest) {
            size_of.extend(sizes);
            rest.retain(|id| !size_of.contains_key(id));
        }
    }
    let sizes = parallel_map(&rest, |id| {
        Ok(match store.odb.header(id) {
            Ok((Kind::Blob, size)) => Some(size),
            _ => None,
        })
    })?;
    for (id, size) in rest.into_iter().zip(sizes) {
        match size {
            Some(size) => {
                size_of.insert(id, size);
            }
            // A damaged object of the user's (a loose file a power loss left empty: git does not sync
            // loose objects), linked into the store: it goes, so the file hashed in its place below is
            // stored, not skipped as held.
            None if store.odb.header(&id).is_err() => {
                let _ = fs::remove_file(store.odb.path_of(&id));
            }
            None => {}
        }
    }
    for (candidate, outcome) in candidates.iter().zip(outcomes.iter_mut()) {
        if let Outcome::Seeded(stat, id, _) = outcome
            && size_of.get(id) != Some(&stat.size)
        {
            let misplaced = AtomicUsize::new(0);
            // Its permission bits were noted when it was first examined.
            let odd_modes = OddModes::default();
            *outcome = examine(
                store,
                config,
                cache,
                None,
                &mut Worker::new(beneath, &misplaced, &odd_modes),
                (candidate, None),
            )?;
        }
    }
    Ok(outcomes)
}

/// The lstat data of a candidate: its kind, the stat data the cache compares, and the owner seeding
/// compares.
#[derive(Clone, Copy)]
pub(crate) struct Seen {
    kind: SeenKind,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    ino: u64,
    dev: u64,
    /// The owner, which seeding compares with the user's index as git does.
    uid: u32,
    gid: u32,
    /// The permission bits (`0o777` of the mode).
    permissions: u32,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SeenKind {
    File { executable: bool },
    Link,
    Dir,
    Other,
}

impl Seen {
    #[cfg(test)]
    pub(crate) fn from_std(meta: fs::Metadata) -> Seen {
        let kind = if meta.file_type().is_symlink() {
            SeenKind::Link
        } else if meta.is_file() {
            SeenKind::File {
                executable: Mode::is_executable(std::os::unix::fs::PermissionsExt::mode(
                    &meta.permissions(),
                )),
            }
        } else if meta.is_dir() {
            SeenKind::Dir
        } else {
            SeenKind::Other
        };
        let stat = Stat::of(&meta, Mode::File);
        Seen {
            kind,
            size: stat.size,
            mtime_ns: stat.mtime_ns,
            ctime_ns: stat.ctime_ns,
            ino: stat.ino,
            dev: stat.dev,
            uid: std::os::unix::fs::MetadataExt::uid(&meta),
            gid: std::os::unix::fs::MetadataExt::gid(&meta),
            permissions: std::os::unix::fs::MetadataExt::mode(&meta) & 0o777,
        }
    }

    // The field types of `Stat` differ between rustix's backends (signed or not): the casts say which
    // git's stat data means.
    #[allow(clippy::unnecessary_cast)]
    pub(crate) fn from_rustix(st: &rustix::fs::Stat) -> Seen {
        let file_type = rustix::fs::FileType::from_raw_mode(st.st_mode as _);
        let kind = if file_type.is_symlink() {
            SeenKind::Link
        } else if file_type.is_file() {
            SeenKind::File {
                executable: Mode::is_executable(st.st_mode),
            }
        } else if file_type.is_dir() {
            SeenKind::Dir
        } else {
            SeenKind::Other
        };
        Seen {
            kind,
            size: st.st_size as u64,
            mtime_ns: i128::from(st.st_mtime as i64) * 1_000_000_000
                + i128::from(st.st_mtime_nsec as i64),
            ctime_ns: i128::from(st.st_ctime as i64) * 1_000_000_000
                + i128::from(st.st_ctime_nsec as i64),
            ino: st.st_ino as u64,
            dev: st.st_dev as u64,
            uid: st.st_uid as u32,
            gid: st.st_gid as u32,
            permissions: st.st_mode as u32 & 0o777,
        }
    }

    /// The mode it is tracked as, when it is a file or a symlink.
    pub(crate) fn mode(&self) -> Option<Mode> {
        match self.kind {
            SeenKind::Link => Some(Mode::Link),
            SeenKind::File { executable: true } => Some(Mode::Exec),
            SeenKind::File { executable: false } => Some(Mode::File),
            SeenKind::Dir | SeenKind::Other => None,
        }
    }

    /// The size, owner and times as git's index stores them (32-bit fields, seconds and nanoseconds).
    pub(crate) fn as_in_index(&self) -> IndexStat {
        let split = |ns: i128| {
            (
                ns.div_euclid(1_000_000_000) as i64 as u32,
                ns.rem_euclid(1_000_000_000) as u32,
            )
        };
        IndexStat {
            size: self.size,
            mtime: split(self.mtime_ns),
            ctime: split(self.ctime_ns),
            ino: self.ino as u32,
            uid: self.uid,
            gid: self.gid,
        }
    }

    /// The stat data the cache compares, for the file tracked as `mode`.
    pub(crate) fn stat(&self, mode: Mode) -> Stat {
        Stat {
            mode,
            size: self.size,
            mtime_ns: self.mtime_ns,
            ctime_ns: self.ctime_ns,
            ino: self.ino,
            dev: self.dev,
        }
    }
}

/// A file's stat data in the terms of git's index (`Seen::as_in_index`).
pub(crate) struct IndexStat {
    pub size: u64,
    pub mtime: (u32, u32),
    pub ctime: (u32, u32),
    pub ino: u32,
    pub uid: u32,
    pub gid: u32,
}

impl IndexStat {
    /// Whether an index entry's 32-bit size is this file's (a file of 4 GiB or more never matches).
    pub fn has_size(&self, recorded: u32) -> bool {
        self.size <= u64::from(u32::MAX) && recorded == self.size as u32
    }
}

/// A directory opened (`O_PATH`, below the worktree's top, no symlink followed on the way:
/// `beneath::Root::dir`) by one worker, so the files in it are looked up and read by name, never through a
/// symlink put in place of a directory since the walk.
struct OpenDir {
    dir: String,
    /// The handle, or the error number that opening it met.
    fd: Option<Result<rustix::fd::OwnedFd, i32>>,
}

impl OpenDir {
    fn none() -> OpenDir {
        OpenDir {
            dir: String::new(),
            fd: None,
        }
    }

    /// The open handle of worktree directory `dir` (`""` or `a/b/`). An error that `beneath::moved` knows
    /// says the directory is gone or is not a real directory of the worktree now.
    fn of(&mut self, root: &Root, dir: &str) -> std::io::Result<&rustix::fd::OwnedFd> {
        if self.fd.is_none() || self.dir != dir {
            let opened = root.dir(dir.trim_end_matches('/')).map_err(|e| {
                e.raw_os_error()
                    .unwrap_or(rustix::io::Errno::IO.raw_os_error())
            });
            self.fd = Some(opened);
            dir.clone_into(&mut self.dir);
        }
        match &self.fd {
            Some(Ok(fd)) => Ok(fd),
            Some(Err(code)) => Err(std::io::Error::from_raw_os_error(*code)),
            None => Err(std::io::Error::from(rustix::io::Errno::NOENT)),
        }
    }
}

/// What each thread examining candidates keeps between them.
struct Worker<'a> {
    /// The worktree's top directory, below which `open` opens directories.
    beneath: &'a Root,
    open: OpenDir,
    /// How far the stat cache's positions were from the candidates' at the last path found in it.
    shift: isize,
    /// Counts the paths the stat cache held elsewhere than where the shift said.
    misplaced: &'a AtomicUsize,
    /// Where the private permission bits this worker's looks saw go when it is dropped (`OddModes`).
    odd_modes: &'a OddModes,
    /// Those bits, noted by this worker.
    odd: Vec<(String, u32)>,
    /// The snapshot the store returned last (`Store::newest_returned`), read once a file over the size
    /// cap that the stat cache does not hold is met (`was_tracked`); `Some(None)` when there is none.
    previous: Option<Option<crate::tree::LazyTree<'a>>>,
}

impl Drop for Worker<'_> {
    fn drop(&mut self) {
        self.odd_modes.add(std::mem::take(&mut self.odd));
    }
}

impl<'a> Worker<'a> {
    fn new(beneath: &'a Root, misplaced: &'a AtomicUsize, odd_modes: &'a OddModes) -> Worker<'a> {
        Worker {
            beneath,
            open: OpenDir::none(),
            shift: 0,
            misplaced,
            odd_modes,
            odd: Vec::new(),
            previous: None,
        }
    }

    /// Whether the snapshot the store returned last holds `rel`: a file in it stays tracked when it has
    /// grown past the size cap (SPEC 2.3), also when the stat cache does not hold it (a cache dropped as
    /// damaged or of an older format, or not taught by a revert in a process that did not hold it). A
    /// snapshot that cannot be read answers no.
    fn was_tracked(&mut self, store: &'a Store, rel: &str) -> bool {
        let previous = self.previous.get_or_insert_with(|| {
            store
                .newest_returned()
                .map(|id| crate::tree::LazyTree::new(&store.odb, id))
        });
        previous
            .as_mut()
            .is_some_and(|tree| tree.get(rel).is_ok_and(|entry| entry.is_some()))
    }

    /// Where the stat cache probably holds `candidate`.
    fn hint(&self, candidate: &Candidate) -> usize {
        candidate.at.saturating_add_signed(self.shift)
    }
}

/// lstat of a candidate, through its directory's handle.
fn lstat(worker: &mut Worker, candidate: &Candidate) -> std::io::Result<Seen> {
    let fd = worker.open.of(worker.beneath, candidate.dir())?;
    rustix::fs::statat(fd, candidate.name(), AtFlags::SYMLINK_NOFOLLOW)
        .map(|st| Seen::from_rustix(&st))
        .map_err(std::io::Error::from)
}

/// The candidate's file opened for reading through its directory's handle (`lstat` opened it).
fn open_candidate(worker: &mut Worker, candidate: &Candidate) -> std::io::Result<fs::File> {
    let fd = worker.open.of(worker.beneath, candidate.dir())?;
    Root::file_for_reading(fd, candidate.name())
}

fn examine<'a>(
    store: &'a Store,
    config: &GitStoreConfig,
    cache: &StatCache,
    seed: Option<&Seed>,
    worker: &mut Worker<'a>,
    (candidate, mut first_look): (&Candidate, Option<Seen>),
) -> GitResult<Outcome> {
    let rel = candidate.rel;
    for _attempt in 0..3 {
        let looked = match first_look.take() {
            Some(seen) => Ok(seen),
            None => lstat(worker, candidate),
        };
        let seen = match looked {
            Ok(seen) => seen,
            // Deleted since the walk listed it, or a directory above it removed or replaced (by a file,
            // a symlink): gone from this track, as from one taken a moment later.
            Err(e) if crate::beneath::moved(&e) => return Ok(Outcome::Gone),
            Err(e) => return Err(unreadable(rel, &e.to_string())),
        };
        let mode = match (seen.mode(), seen.kind) {
            (Some(mode), _) => mode,
            (None, SeenKind::Dir) => {
                // It turned into a directory after the walk listed it (another program at work): the file
                // is gone from this track, as a deleted one is, and the directory, which the walk did not
                // list, is the next track's to see (its parent changed, so that track lists it again).
                // Nothing below it is in this snapshot, so no restore to it removes the directory.
                return Ok(Outcome::Gone);
            }
            (None, _) => {
                return Ok(Outcome::Skipped(SkippedPath {
                    path: rel.to_owned(),
                    reason: SkipReason::Special,
                }));
            }
        };
        if let Some(bits) = private_bits(&seen) {
            worker.odd.push((rel.to_owned(), bits));
        }
        let stat = seen.stat(mode);
        let hint = worker.hint(candidate);
        if let Some((at, id)) = cache.fresh_near(hint, rel, &stat) {
            if at != hint {
                worker.misplaced.fetch_add(1, Ordering::Relaxed);
                worker.shift = at as isize - candidate.at as isize;
            }
            return Ok(Outcome::Tracked(stat, id, false));
        }
        // The size cap first: a seeded file is tracked exactly as a hashed one would be.
        if mode != Mode::Link
            && stat.size > config.size_cap
            && !cache.entries.contains_key(rel)
            && !worker.was_tracked(store, rel)
        {
            return Ok(Outcome::Skipped(SkippedPath {
                path: rel.to_owned(),
                reason: SkipReason::TooLarge { size: stat.size },
            }));
        }
        if let Some(id) = seed.and_then(|seed| seed.lookup(rel, &seen.as_in_index(), mode)) {
            return Ok(Outcome::Seeded(stat, id, false));
        }
        if config.read_fault.as_ref().is_some_and(|fault| fault(rel)) {
            return Err(unreadable(rel, "injected read fault"));
        }
        // An entry of the user's index whose stat data is not believed (a file written in the second the
        // index was, which git leaves racy or smudges): the file is hashed without being stored, and when
        // it is the recorded blob, that blob is adopted as a seeded one instead of being compressed and
        // written again.
        if mode != Mode::Link
            && let Some(recorded) =
                seed.and_then(|seed| seed.recorded(rel, &seen.as_in_index(), mode))
        {
            let hashed = open_candidate(worker, candidate)
                .and_then(|source| Odb::hash_blob_of(source, stat.size));
            match hashed {
                Ok(Some(id)) if id == recorded => return Ok(Outcome::Seeded(stat, id, true)),
                // Another content, or its size changed while it was read: stored as any other file.
                Ok(_) => {}
                Err(e) if crate::odb::gone(&e) => return Ok(Outcome::Gone),
                // Something else stands there now: look again.
                Err(e) if crate::odb::replaced_meanwhile(&e) => continue,
                Err(e) => return Err(unreadable(rel, &e.to_string())),
            }
        }
        if mode == Mode::Link {
            let target = worker
                .open
                .of(worker.beneath, candidate.dir())
                .and_then(|fd| {
                    rustix::fs::readlinkat(fd, candidate.name(), Vec::new())
                        .map_err(std::io::Error::from)
                });
            let target = match target {
                Ok(target) => target,
                Err(e) if crate::odb::gone(&e) => return Ok(Outcome::Gone),
                // Not a symlink any more: look again.
                Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => continue,
                Err(e) => return Err(unreadable(rel, &e.to_string())),
            };
            let id = store.odb.write_buf(Kind::Blob, target.as_bytes())?;
            return Ok(Outcome::Tracked(stat, id, true));
        }
        let source = match open_candidate(worker, candidate) {
            Ok(source) => source,
            Err(e) if crate::odb::gone(&e) => return Ok(Outcome::Gone),
            // Something else stands there now: look again.
            Err(e) if crate::odb::replaced_meanwhile(&e) => continue,
            Err(e) => return Err(unreadable(rel, &e.to_string())),
        };
        match store.odb.write_blob_of(source, stat.size) {
            Ok(Some(id)) => return Ok(Outcome::Tracked(stat, id, true)),
            // The size changed while it was read: look again.
            Ok(None) => continue,
            // Storing it failed, not reading it (black-box: a full data directory was reported as a
            // worktree file that could not be read).
            Err(e) if crate::error::is_write_failure(&e) => {
                return Err(GitError::StoreWrite {
                    store: store.dir.display().to_string(),
                    source: e,
                });
            }
            Err(e) => return Err(unreadable(rel, &e.to_string())),
        }
    }
    Err(unreadable(rel, "it kept changing while it was being read"))
}

fn unreadable(rel: &str, reason: &str) -> GitError {
    GitError::Unreadable {
        path: rel.to_owned(),
        reason: reason.to_owned(),
    }
}

/// The cache's files looked at while the walk runs: for each position of the cache, whether its file's
/// lstat data was the entry's (and the entry not racy). Threads take chunks of positions until none is
/// left. A file looked at here is looked at during the track, as when it is looked at after the walk: a
/// change after the look is the next track's to see, as always.
struct Prestat {
    fresh: Vec<AtomicBool>,
    next_chunk: AtomicUsize,
    /// Whether a file of the cache was found that is to be hashed again.
    to_hash: AtomicBool,
}

const PRESTAT_CHUNK: usize = 256;

impl Prestat {
    fn new(positions: usize) -> Prestat {
        Prestat {
            fresh: (0..positions).map(|_| AtomicBool::new(false)).collect(),
            next_chunk: AtomicUsize::new(0),
            to_hash: AtomicBool::new(false),
        }
    }

    /// Looks at chunks of the files of `entries` (from a cache a track began at `cache_started_ns`) until
    /// none is left.
    fn run(
        &self,
        root: &Root,
        entries: &PathMap<CacheEntry>,
        cache_started_ns: i128,
        odd_modes: &OddModes,
    ) {
        let mut open = OpenDir::none();
        let mut odd = Vec::new();
        loop {
            let start = self
                .next_chunk
                .fetch_add(1, Ordering::Relaxed)
                .saturating_mul(PRESTAT_CHUNK);
            if start >= self.fresh.len() {
                odd_modes.add(odd);
                return;
            }
            let end = (start + PRESTAT_CHUNK).min(self.fresh.len());
            for at in start..end {
                let Some((path, entry)) = entries.at(at) else {
                    continue;
                };
                let (dir, name) = match path.rfind('/') {
                    Some(slash) => path.split_at(slash + 1),
                    None => ("", path),
                };
                // A directory that cannot be opened as one (gone, or a symlink now) is left to the walk.
                let Ok(fd) = open.of(root, dir) else {
                    continue;
                };
                let Ok(st) = rustix::fs::statat(fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                else {
                    continue;
                };
                let seen = Seen::from_rustix(&st);
                if let Some(bits) = private_bits(&seen) {
                    odd.push((path.to_owned(), bits));
                }
                match seen.mode() {
                    Some(mode) if entry.answers(&seen.stat(mode), cache_started_ns) => {
                        self.fresh[at].store(true, Ordering::Relaxed);
                    }
                    Some(_) => self.to_hash.store(true, Ordering::Relaxed),
                    None => {}
                }
            }
        }
    }

    /// Whether a `run` found a file of the cache that is to be hashed again (changed, or racy).
    fn found_to_hash(&self) -> bool {
        self.to_hash.load(Ordering::Relaxed)
    }

    /// Makes every `run` return after its chunk (the walk failed, or the cache's listings did not parse).
    fn stop(&self) {
        self.next_chunk
            .store(usize::MAX / PRESTAT_CHUNK, Ordering::Relaxed);
    }

    /// Whether the file at position `at` of the cache was found as cached (after every `run` ended).
    fn was_fresh(&self, at: usize) -> bool {
        self.fresh
            .get(at)
            .is_some_and(|fresh| fresh.load(Ordering::Relaxed))
    }
}

/// `dir` + `name` + `tail`, in a string made at its size: `format!` grows its string as it writes, and
/// the walk makes one per file (a first track of a 100,000-file packed repository: 289 -> 273 ms,
/// medians of 12 alternating runs of `snapshot_bench child track`).
fn joined(dir: &str, name: &str, tail: &str) -> String {
    let mut path = String::with_capacity(dir.len() + name.len() + tail.len());
    path.push_str(dir);
    path.push_str(name);
    path.push_str(tail);
    path
}

/// From how many files the aligned path examines them on several threads.
const EXAMINE_IN_PARALLEL_FROM: usize = 16;

/// How many threads stat and hash files (they are IO-bound): the cores, at most 8. Asked once per process:
/// the standard library reads the cgroup's CPU quota from three files at each call, and an operation asks
/// several times.
pub(crate) fn worker_threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .clamp(1, 8)
    })
}

/// Maps `items` on a few threads (stat and hashing are IO-bound), keeping order; the first error wins.
pub fn parallel_map<T: Sync, R: Send>(
    items: &[T],
    f: impl Fn(&T) -> GitResult<R> + Sync,
) -> GitResult<Vec<R>> {
    parallel_map_with(items, || (), |_, item| f(item))
}

/// `parallel_map` where each thread has state of its own, made by `init` (it sees a contiguous run of
/// `items`).
pub fn parallel_map_with<T: Sync, R: Send, S>(
    items: &[T],
    init: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, &T) -> GitResult<R> + Sync,
) -> GitResult<Vec<R>> {
    parallel_map_on(items, worker_threads(), 256, init, f)
}

/// `parallel_map_with` on `threads` threads, or on this one when there are fewer than `min_items`.
pub fn parallel_map_on<T: Sync, R: Send, S>(
    items: &[T],
    threads: usize,
    min_items: usize,
    init: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, &T) -> GitResult<R> + Sync,
) -> GitResult<Vec<R>> {
    if items.len() < min_items.max(2) || threads <= 1 {
        // A panic here ends as a worker's does, in an error (review: a revert's writes, which run here
        // for a batch of up to 16 files, settle the files the batch moved aside whatever its outcome).
        return std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut state = init();
            items.iter().map(|item| f(&mut state, item)).collect()
        }))
        .unwrap_or_else(|_| Err(GitError::Other("a worker thread panicked".to_owned())));
    }
    let chunk = items.len().div_ceil(threads);
    let results: Vec<GitResult<Vec<R>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| {
                scope.spawn(|| {
                    let mut state = init();
                    part.iter()
                        .map(|item| f(&mut state, item))
                        .collect::<GitResult<Vec<R>>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(GitError::Other("a worker thread panicked".to_owned())))
            })
            .collect()
    });
    let mut all = Vec::with_capacity(items.len());
    for part in results {
        all.extend(part?);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listing holds its names in the order of their bytes, whatever order the file system gives them
    /// in (ext4 by hash, btrfs by when each was made or renamed there): the same names read again are the
    /// same listing.
    #[test]
    fn a_listing_holds_its_names_in_their_order_not_the_file_system_s() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let names: Vec<String> = (0..40u32)
            .map(|n| format!("{:08x}", n.wrapping_mul(2_654_435_761)))
            .collect();
        for name in names.iter().rev() {
            std::fs::write(dir.path().join(name), name).expect("write");
        }
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        let root = Root::open(dir.path()).expect("open the root");
        let (listed, skipped, _, cacheable) = read_listing(&root, (dir.path(), ""))
            .expect("read the listing")
            .expect("a listing");
        let got: Vec<&str> = listed.iter().map(|e| e.name).collect();
        let mut expected: Vec<&str> = names.iter().map(String::as_str).chain(["sub"]).collect();
        expected.sort_unstable();
        assert_eq!(got, expected);
        assert!(skipped.is_empty() && cacheable);
    }

    /// The walk's files in one string: each comes back whole, with its directory and its name, at its
    /// position, in the order they were listed (the top directory's too, and names that are not ASCII).
    #[test]
    fn candidates_give_back_each_path_its_directory_and_its_name() {
        let listed = [
            ("", "top.txt"),
            ("dir/", "b"),
            ("dir/ü ß/", "c d.rs"),
            ("dir/ü ß/", "é"),
            ("", ".gitignore"),
        ];
        let mut candidates = Candidates::default();
        for (dir, name) in listed {
            candidates.push(dir, name);
        }
        assert_eq!(candidates.len(), listed.len());
        let got: Vec<(usize, String, String, String)> = candidates
            .iter()
            .map(|c| {
                (
                    c.at,
                    c.rel.to_owned(),
                    c.dir().to_owned(),
                    c.name().to_owned(),
                )
            })
            .collect();
        let expected: Vec<(usize, String, String, String)> = listed
            .iter()
            .enumerate()
            .map(|(at, (dir, name))| {
                (
                    at,
                    format!("{dir}{name}"),
                    (*dir).to_owned(),
                    (*name).to_owned(),
                )
            })
            .collect();
        assert_eq!(got, expected);
    }

    /// A panic in the work is an error whether the items are taken on the calling thread (one thread, or
    /// fewer items than `min_items`) or on several: the caller goes on to what it does after (a revert's
    /// writes settle the files they moved aside).
    #[test]
    fn a_panic_in_the_work_is_an_error_on_one_thread_as_on_several() {
        let items: Vec<u32> = (0..32).collect();
        let work = |(): &mut (), item: &u32| -> GitResult<u32> {
            assert!(*item != 7, "item 7");
            Ok(*item)
        };
        for (threads, min_items) in [(1, 1), (4, 64), (4, 1)] {
            let outcome = parallel_map_on(&items, threads, min_items, || (), work);
            assert!(
                matches!(&outcome, Err(GitError::Other(m)) if m.contains("panicked")),
                "{threads} threads, from {min_items} items: {outcome:?}"
            );
        }
        let fine = parallel_map_on(&items[..7], 1, 1, || (), work).expect("no panic");
        assert_eq!(fine, (0..7).collect::<Vec<_>>());
    }

    /// A cache far out of walk order (an older version's, or after many files moved) still answers (the
    /// track reads nothing and returns the same tree), and is written again in walk order, so the next
    /// track finds every file where it looks first.
    #[test]
    fn a_cache_out_of_walk_order_is_rewritten_in_order() {
        use crate::config::{ExcludesFile, GitStoreConfig};

        let temp = tempfile::tempdir().expect("a temporary directory");
        let wt = temp.path().join("wt");
        for i in 0..60 {
            let path = wt.join(format!("d{}/f{i}.txt", i % 4));
            fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            fs::write(path, format!("{i}\n")).expect("write");
        }
        let mut config = GitStoreConfig::new(temp.path().join("data"), "unit");
        config.excludes_file = ExcludesFile::None;
        let store = Store::open(&config, &wt).expect("open the store");
        track(&store, &config).expect("the first track");
        // Past the racy margin, so every file is answered by the cache.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let settled = track(&store, &config).expect("a track past the racy margin");
        let path = store.stat_cache_path();
        let walk_order = |cache: &StatCache| -> Vec<String> {
            cache.entries.iter().map(|(p, _)| p.to_owned()).collect()
        };
        let cache = StatCache::load(&path);
        let in_order = walk_order(&cache);
        let mut reversed = PathMap::default();
        for (p, entry) in cache.entries.iter().collect::<Vec<_>>().into_iter().rev() {
            reversed.push_new(p, *entry);
        }
        StatCache {
            entries: reversed,
            ..cache
        }
        .save(&path)
        .expect("save the reversed cache");

        let again = track(&store, &config).expect("a track over the reversed cache");
        assert_eq!((again.id, again.hashed), (settled.id, 0));
        assert_eq!(walk_order(&StatCache::load(&path)), in_order);
    }

    /// The look taken during the walk says "as cached" only for a file whose lstat data is the entry's
    /// and not racy: not for one edited since, one that became a directory, one that is gone, one below a
    /// directory that became a symlink, or one the cache would hash again anyway (racy).
    #[test]
    fn the_look_during_the_walk_trusts_only_unchanged_files() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let root = dir.path();
        for name in [
            "same",
            "edited",
            "becomes-dir",
            "gone",
            "sub/inside",
            "racy",
        ] {
            let path = root.join(name);
            fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            fs::write(&path, name).expect("write");
        }
        let id = ObjectId::null(gix::hash::Kind::Sha1);
        let stat_of = |name: &str| {
            Stat::of(
                &fs::symlink_metadata(root.join(name)).expect("lstat"),
                Mode::File,
            )
        };
        let mut cache = StatCache {
            started_ns: now_ns() + 10_000_000_000,
            ..StatCache::default()
        };
        for name in ["same", "edited", "becomes-dir", "gone", "sub/inside"] {
            cache.entries.push_new(
                name,
                CacheEntry {
                    stat: stat_of(name),
                    id,
                },
            );
        }
        let mut racy = stat_of("racy");
        racy.mtime_ns = cache.started_ns;
        cache
            .entries
            .push_new("racy", CacheEntry { stat: racy, id });

        fs::write(root.join("edited"), "edited, longer").expect("edit");
        fs::remove_file(root.join("becomes-dir")).expect("rm");
        fs::create_dir(root.join("becomes-dir")).expect("mkdir");
        fs::remove_file(root.join("gone")).expect("rm");
        fs::rename(root.join("sub"), root.join("real-sub")).expect("mv");
        std::os::unix::fs::symlink(root.join("real-sub"), root.join("sub")).expect("symlink");

        let prestat = Prestat::new(cache.entries.positions());
        let beneath = Root::open(root).expect("open the top");
        prestat.run(
            &beneath,
            &cache.entries,
            cache.started_ns,
            &OddModes::default(),
        );
        let fresh: Vec<bool> = (0..6).map(|at| prestat.was_fresh(at)).collect();
        assert_eq!(fresh, [true, false, false, false, false, false]);

        let stopped = Prestat::new(cache.entries.positions());
        stopped.stop();
        stopped.run(
            &beneath,
            &cache.entries,
            cache.started_ns,
            &OddModes::default(),
        );
        assert!(!stopped.was_fresh(0), "a stopped look looks at nothing");
    }
}
