//! The ignore rules of SPEC 2.2, as `git add -A` in the worktree would apply them: every `.gitignore` in the
//! tree, the enclosing repository's `info/exclude` and `.gitignore` files above a subdirectory worktree, and
//! the global excludes file. Paths are matched relative to the enclosing repository's root (or the worktree
//! when it is in no repository), so anchored patterns mean what they mean to git.

use std::path::{Path, PathBuf};

use gix::bstr::ByteSlice;
use gix::glob::pattern::Case;
use gix::glob::search::pattern::List;
use gix::ignore::search::Ignore;
use serde::{Deserialize, Serialize};
use sha1::Digest as _;

use crate::config::ExcludesFile;
use crate::error::{GitError, GitResult};

/// Ignore rules from outside the worktree's tree, recorded with each snapshot so that "was this path
/// untracked at that snapshot" can be answered later.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutsideRule {
    /// The directory the rules are relative to (relative to the ignore root, ending in `/`), or none for
    /// global rules.
    pub base: Option<String>,
    /// The rules' text.
    pub text: String,
    /// Whether these are the user's global excludes (`core.excludesFile`): the only outside rules that
    /// also hold inside a nested repository (see `Ignores::nested`). Records from before it was kept say
    /// false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub global: bool,
    /// Whether the rule set this one belongs to matches regardless of case (`core.ignoreCase`, as git
    /// matches then): said by every rule of the set, and a set with no rule from outside holds one without
    /// text to say it (`marked_case`). Records from before it was kept say false, as their tracks matched.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fold_case: bool,
}

/// `outside` with every rule saying whether the set matches regardless of case, and a rule without text
/// to say it when the set has none.
fn marked_case(mut outside: Vec<OutsideRule>, fold: bool) -> Vec<OutsideRule> {
    for rule in &mut outside {
        rule.fold_case = fold;
    }
    if fold && outside.is_empty() {
        outside.push(OutsideRule {
            base: None,
            text: String::new(),
            global: false,
            fold_case: true,
        });
    }
    outside
}

/// The git repository a worktree lies in, if any.
#[derive(Clone, Debug)]
pub struct Enclosing {
    /// The repository's worktree root (its `core.worktree` when it sets one).
    pub root: PathBuf,
    /// The directory whose `.git` was found: where the repository is opened from (`gix::open` of a
    /// `core.worktree` root, which holds no `.git`, fails).
    pub found_at: PathBuf,
    /// Its git dir (for a linked worktree, the worktree's own; the index lives there).
    pub git_dir: PathBuf,
    /// Its common git dir (where `info/exclude` lives).
    pub common_dir: PathBuf,
}

/// Finds the repository whose worktree contains `worktree` (the worktree itself included).
pub fn enclosing_repository(worktree: &Path) -> Option<Enclosing> {
    let mut dir = worktree.to_path_buf();
    loop {
        let dot_git = dir.join(".git");
        // A `.git` directory that is no repository's (empty, say) is passed over, as git's discovery
        // passes it over.
        if dot_git.is_dir() && is_git_directory(&dot_git) {
            let common_dir = common_dir_of(&dot_git);
            return with_core_worktree(
                worktree,
                Enclosing {
                    root: dir.clone(),
                    found_at: dir,
                    git_dir: dot_git,
                    common_dir,
                },
            );
        }
        if dot_git.is_file() {
            let text = std::fs::read_to_string(&dot_git).ok()?;
            let git_dir = text.trim().strip_prefix("gitdir:")?.trim();
            let git_dir = dir.join(git_dir);
            let common_dir = common_dir_of(&git_dir);
            return with_core_worktree(
                worktree,
                Enclosing {
                    root: dir.clone(),
                    found_at: dir,
                    git_dir,
                    common_dir,
                },
            );
        }
        if !dir.pop() {
            return None;
        }
    }
}

/// `found` with its root moved to the repository's `core.worktree` when it sets one (relative to the git
/// dir): git's worktree is then that directory, not the one holding `.git`, and the ignore files between
/// them are not git's. A `worktree` outside that directory is in no repository's worktree (none).
fn with_core_worktree(worktree: &Path, found: Enclosing) -> Option<Enclosing> {
    let config = gix::config::File::from_path_no_includes(
        found.git_dir.join("config"),
        gix::config::Source::Local,
    );
    let Some(set) = config
        .ok()
        .and_then(|config| config.string("core.worktree").map(|v| v.to_string()))
    else {
        return Some(found);
    };
    let root = std::fs::canonicalize(found.git_dir.join(set)).ok()?;
    worktree
        .starts_with(&root)
        .then_some(Enclosing { root, ..found })
}

/// Whether `git_dir` is a repository's git directory, as git's `is_git_directory` checks it: `objects/`
/// and `refs/` in its common directory (a linked worktree's are its repository's) and a `HEAD` that names
/// a ref or a commit.
fn is_git_directory(git_dir: &Path) -> bool {
    let common = common_dir_of(git_dir);
    common.join("objects").is_dir()
        && common.join("refs").is_dir()
        && crate::store::names_a_head(&git_dir.join("HEAD"))
}

fn common_dir_of(git_dir: &Path) -> PathBuf {
    match std::fs::read_to_string(git_dir.join("commondir")) {
        Ok(text) => git_dir.join(text.trim()),
        Err(_) => git_dir.to_path_buf(),
    }
}

/// The ignore rules in force for one worktree, with a stack of per-directory `.gitignore` lists that the
/// walk pushes and pops.
#[derive(Clone, Debug)]
pub struct Ignores {
    search: gix::ignore::Search,
    /// The worktree relative to the ignore root: empty, or `sub/dir/`.
    prefix: String,
    /// True when a directory above the worktree is itself ignored: then everything is.
    all_ignored: bool,
    /// Whether patterns match regardless of case (`core.ignoreCase`; `OutsideRule::fold_case`).
    fold_case: bool,
    /// How many lists come from outside the tree (the per-directory lists follow them).
    outside_lists: usize,
    /// The rules from outside the tree, in precedence order (lowest first).
    pub outside: Vec<OutsideRule>,
    /// The repository the worktree lies in, if any.
    pub enclosing: Option<Enclosing>,
    /// The text of the worktree's root `.gitignore` as it was pushed (none when there is none).
    pub root_rules: Option<String>,
}

impl Ignores {
    /// Assembles the outside rules of `worktree` (global excludes, `info/exclude`, `.gitignore` files above
    /// it in its repository) and the worktree's own root `.gitignore`.
    pub fn for_worktree(
        worktree: &Path,
        excludes: &ExcludesFile,
        home: Option<&Path>,
    ) -> GitResult<Ignores> {
        let enclosing = enclosing_repository(worktree);
        let mut outside = Vec::new();
        // A relative `core.excludesFile` is read from the top level, where git runs (its worktree's, or
        // this one's without a repository), not from rewind's own working directory.
        let top = enclosing
            .as_ref()
            .map_or(worktree, |repo| repo.root.as_path());
        if let Some(path) = global_excludes_path(excludes, enclosing.as_ref(), home)
            && let Some(text) = read_rules_following(&top.join(path))?
        {
            outside.push(OutsideRule {
                base: None,
                text,
                global: true,
                fold_case: false,
            });
        }
        let mut prefix = String::new();
        if let Some(repo) = &enclosing {
            if let Some(text) = read_rules_following(&repo.common_dir.join("info").join("exclude"))?
            {
                outside.push(OutsideRule {
                    base: None,
                    text,
                    global: false,
                    fold_case: false,
                });
            }
            let relative = worktree
                .strip_prefix(&repo.root)
                .map_err(|_| GitError::Other("worktree is not inside its repository".to_owned()))?;
            let mut dir = repo.root.clone();
            let mut base = String::new();
            for component in relative.components() {
                if let Some(text) = read_gitignore(&dir)? {
                    outside.push(OutsideRule {
                        base: (!base.is_empty()).then(|| base.clone()),
                        text,
                        global: false,
                        fold_case: false,
                    });
                }
                let name = component.as_os_str().to_str().ok_or_else(|| {
                    GitError::Refused(format!(
                        "worktree path {} is not valid UTF-8",
                        worktree.display()
                    ))
                })?;
                dir.push(name);
                base.push_str(name);
                base.push('/');
            }
            prefix = base;
        }
        let fold = crate::git_config::configured_ignore_case(enclosing.as_ref(), home);
        let mut ignores = Ignores::from_outside(marked_case(outside, fold), prefix);
        ignores.enclosing = enclosing;
        ignores.root_rules = read_gitignore(worktree)?;
        let root_rules = ignores.root_rules.clone();
        ignores.push_dir("", root_rules.as_deref());
        Ok(ignores)
    }

    /// Rules rebuilt from a record (for a snapshot taken earlier), with no per-directory lists yet.
    pub fn from_outside(outside: Vec<OutsideRule>, prefix: String) -> Ignores {
        let mut search = gix::ignore::Search::default();
        for rule in &outside {
            let source = match &rule.base {
                Some(base) => PathBuf::from(format!("{base}.gitignore")),
                None => PathBuf::from("<outside>"),
            };
            let root = rule.base.as_ref().map(|_| Path::new(""));
            if let Ok(list) =
                List::from_bytes(rule.text.as_bytes(), source, root, Ignore::default())
            {
                search.patterns.push(list);
            }
        }
        let outside_lists = search.patterns.len();
        let fold_case = outside.iter().any(|rule| rule.fold_case);
        let mut ignores = Ignores {
            search,
            prefix,
            all_ignored: false,
            fold_case,
            outside_lists,
            outside,
            enclosing: None,
            root_rules: None,
        };
        let prefix_dirs: Vec<String> = ancestors_and_self(ignores.prefix.trim_end_matches('/'))
            .map(str::to_owned)
            .collect();
        ignores.all_ignored = prefix_dirs.iter().any(|dir| ignores.matches(dir, true));
        ignores
    }

    /// A hash of every rule in force for the entries of the worktree's root directory: the rules from
    /// outside the tree (in order, with their bases), the worktree's place in its repository, and the root
    /// `.gitignore`; plus the data dir and rewind's own files, which the walk leaves out as it does ignored
    /// entries. The untracked cache reuses which names were ignored only under the same hash.
    pub fn root_rules_hash(&self, data_dir: Option<&Path>, own_files: &[PathBuf]) -> [u8; 20] {
        let mut hasher = sha1::Sha1::new();
        hasher.update(b"rewind untracked cache 1\0");
        hasher.update(self.prefix.as_bytes());
        hasher.update([0, u8::from(self.all_ignored)]);
        for rule in &self.outside {
            hash_text(&mut hasher, rule.base.as_deref());
            hash_text(&mut hasher, Some(&rule.text));
            // (Hashed only when set, so that caches written before it was kept stay valid.)
            if rule.fold_case {
                hasher.update(b"\0fold case");
            }
        }
        hash_text(
            &mut hasher,
            data_dir.map(|d| d.as_os_str().to_string_lossy()).as_deref(),
        );
        for file in own_files {
            hash_text(&mut hasher, Some(&file.as_os_str().to_string_lossy()));
        }
        hash_text(&mut hasher, self.root_rules.as_deref());
        hasher.finalize().into()
    }

    /// The worktree's path relative to the ignore root (`""` or `sub/dir/`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Adds the `.gitignore` of worktree directory `dir` (`""` for the root); returns whether a list was
    /// pushed (pop it when leaving the directory).
    pub fn push_dir(&mut self, dir: &str, text: Option<&str>) -> bool {
        let Some(text) = text else { return false };
        let full = format!("{}{dir}", self.prefix);
        let source = if full.is_empty() {
            PathBuf::from(".gitignore")
        } else {
            PathBuf::from(format!("{}/.gitignore", full.trim_end_matches('/')))
        };
        match List::from_bytes(
            text.as_bytes(),
            source,
            Some(Path::new("")),
            Ignore::default(),
        ) {
            Ok(list) => {
                self.search.patterns.push(list);
                true
            }
            Err(_) => false,
        }
    }

    /// Removes the list pushed last.
    pub fn pop(&mut self) {
        self.search.patterns.pop();
    }

    fn matches(&self, full: &str, is_dir: bool) -> bool {
        if full.is_empty() {
            return false;
        }
        match self.search.pattern_matching_relative_path(
            full.as_bytes().as_bstr(),
            Some(is_dir),
            if self.fold_case {
                Case::Fold
            } else {
                Case::Sensitive
            },
        ) {
            Some(found) => !found.pattern.is_negative(),
            None => false,
        }
    }

    /// Whether the worktree-relative `path` itself is ignored (its parents already checked by the walk).
    pub fn is_ignored(&self, path: &str, is_dir: bool) -> bool {
        self.all_ignored || self.matches(&format!("{}{path}", self.prefix), is_dir)
    }

    /// Whether the worktree lies in a directory its enclosing repository ignores: then nothing in it is
    /// tracked content.
    pub fn worktree_ignored(&self) -> bool {
        self.all_ignored
    }

    /// The rules in force for the entries of the worktree's root: the outside rules and the root
    /// `.gitignore` text given; none when everything is ignored (a directory above the worktree is).
    pub fn rules_below_root(&self, root_text: Option<&str>) -> Option<Ignores> {
        if self.all_ignored {
            return None;
        }
        let mut rules = self.clone();
        rules.search.patterns.truncate(self.outside_lists);
        rules.push_dir("", root_text);
        Some(rules)
    }

    /// Whether `path` (a directory when `is_dir`, as patterns ending in `/` ask) is ignored, checking each
    /// parent directory too, with the `.gitignore` text of each directory (`""` for the root) supplied by
    /// `gitignore_of`, and whether a directory is the root of a nested repository (with its `info/exclude`
    /// text) by `nested_of`. Used for paths the walk did not reach.
    pub fn is_path_ignored(
        &self,
        path: &str,
        is_dir: bool,
        gitignore_of: impl Fn(&str) -> Option<String>,
        nested_of: impl Fn(&str) -> Option<Option<String>>,
    ) -> bool {
        if self.all_ignored {
            return true;
        }
        let mut rules = self.clone();
        rules.search.patterns.truncate(self.outside_lists);
        let dirs: Vec<&str> = ancestors_and_self(path).collect();
        let parents = &dirs[..dirs.len().saturating_sub(1)];
        rules.push_dir("", gitignore_of("").as_deref());
        for dir in parents {
            if rules.is_ignored(dir, true) {
                return true;
            }
            let slashed = format!("{dir}/");
            if let Some(exclude) = nested_of(dir) {
                rules = rules.nested(&slashed, exclude.as_deref());
            }
            rules.push_dir(&slashed, gitignore_of(dir).as_deref());
        }
        rules.is_ignored(path, is_dir)
    }

    /// The rules for what lies in the nested repository rooted at worktree directory `dir` (`a/b/`), its
    /// own `.gitignore` not pushed yet: the user's global excludes and the nested repository's
    /// `info/exclude` (`exclude`), both relative to its root, as git reads them there. None of the
    /// enclosing repository's rules hold inside it (SPEC 2.2: nested repositories are snapshotted under
    /// their own ignore rules; black-box: a superproject's `*.p` hid a submodule's committed `config.p`,
    /// whose edits a turn then made for good). Its patterns match regardless of case as its own
    /// `core.ignoreCase` says (`nested_folds_case`); its own `core.excludesFile` is not read.
    pub fn nested(&self, dir: &str, exclude: Option<&str>) -> Ignores {
        let base = format!("{}{dir}", self.prefix);
        let global = self.outside.iter().filter(|rule| rule.global);
        let outside = global
            .map(|rule| (rule.text.as_str(), true))
            .chain(exclude.map(|text| (text, false)))
            .map(|(text, global)| OutsideRule {
                base: Some(base.clone()),
                text: text.to_owned(),
                global,
                fold_case: false,
            })
            .collect();
        Ignores::from_outside(
            marked_case(outside, nested_folds_case(exclude)),
            self.prefix.clone(),
        )
    }

    /// A hash of the rules `nested` starts from, standing for the parent's in the untracked cache's hash
    /// of the nested repository's root directory.
    pub fn nested_rules_hash(&self, dir: &str, exclude: Option<&str>) -> [u8; 20] {
        let mut hasher = sha1::Sha1::new();
        hasher.update(b"rewind nested repository rules 1\0");
        hasher.update(self.prefix.as_bytes());
        hasher.update(dir.as_bytes());
        for rule in self.outside.iter().filter(|rule| rule.global) {
            hash_text(&mut hasher, Some(&rule.text));
        }
        // (A nested repository's own `core.ignoreCase` is in `exclude`: `FOLD_CASE_LINE`.)
        hash_text(&mut hasher, exclude);
        hasher.finalize().into()
    }
}

/// When worktree directory `dir` is the root of a nested git repository (it has a `.git` directory, or a
/// `.git` file naming its git directory, as a submodule's does): the text of that repository's
/// `info/exclude`, if any. None when it is not one, also when `dir` is not a directory now (absent, a file,
/// or a symlink, which is not followed): a revert asks about the directories of paths it deletes, and a
/// turn or the user may have put a file where one was (black-box: the `.git` looked for below a file
/// failed the whole revert with "Not a directory").
pub fn nested_repository_exclude(dir: &Path) -> GitResult<Option<Option<String>>> {
    // Not there, below a file, a symlink (not followed), or a symlink that loops (ELOOP: `d -> d`).
    let Some(handle) = open_dir(dir)? else {
        return Ok(None);
    };
    // Its `.git` is looked at through the handle (`read_gitignore` says why); only a repository found
    // there is then read by path.
    let dot_git = dir.join(".git");
    // Another program may remove or replace the `.git` between the look and the read: a `.git` file
    // that is something else by then is looked at again (twice at most, then taken as a repository
    // whose rules are unknown: none).
    let mut looks = 0;
    let git_dir = loop {
        looks += 1;
        let kind = match crate::beneath::lstat_at(&handle, ".git") {
            Ok(stat) => rustix::fs::FileType::from_raw_mode(stat.st_mode),
            Err(e) if crate::odb::gone(&e) => return Ok(None),
            Err(e) => return Err(GitError::io(&dot_git, e)),
        };
        // A symlink is judged by where it leads, as git judges it.
        if matches!(
            kind,
            rustix::fs::FileType::Directory | rustix::fs::FileType::Symlink
        ) {
            break dot_git;
        }
        // A FIFO or a socket named `.git` makes no repository.
        if kind != rustix::fs::FileType::RegularFile {
            return Ok(None);
        }
        let text = match read_in(&handle, ".git") {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) if crate::odb::gone(&e) => return Ok(None),
            Err(e) if crate::odb::replaced_meanwhile(&e) && looks < 2 => continue,
            Err(e) if crate::odb::replaced_meanwhile(&e) => return Ok(Some(None)),
            Err(e) => return Err(GitError::io(&dot_git, e)),
        };
        match text.trim().strip_prefix("gitdir:") {
            Some(git_dir) => break dir.join(git_dir.trim()),
            // Not a gitfile: no repository, as git's `is_nonbare_repository_dir` finds.
            None => return Ok(None),
        }
    };
    // Only a git directory makes one (an empty `.git`, or a gitfile naming a directory that is gone, as
    // a removed linked worktree's leaves, does not): else the directory is walked under the enclosing
    // rules, as `git add -A` walks it (review).
    if !is_git_directory(&git_dir) {
        return Ok(None);
    }
    // Its rule lines only: the text is also kept in each snapshot's record (`SnapshotRecord::nested`), and
    // git's template is comments alone.
    let common_dir = common_dir_of(&git_dir);
    let exclude = read_rules_following(&common_dir.join("info").join("exclude"))?;
    let exclude = exclude.map(|text| rule_lines(&text));
    // Its own `core.ignoreCase`, as git reads it there (the enclosing repository's may differ: review),
    // said by a comment line before the rules, so that the snapshot's record keeps it with them.
    let own = Enclosing {
        root: dir.to_path_buf(),
        found_at: dir.to_path_buf(),
        git_dir,
        common_dir,
    };
    if crate::git_config::configured_ignore_case(Some(&own), None) {
        return Ok(Some(Some(format!(
            "{FOLD_CASE_LINE}{}",
            exclude.unwrap_or_default()
        ))));
    }
    Ok(Some(exclude))
}

/// The line a nested repository's rules (`nested_repository_exclude`) start with when its own
/// configuration sets `core.ignoreCase`: a comment, so no pattern, and never one of the repository's own
/// lines (their comments are not kept). Records from before it was written have none: they were matched
/// by case.
const FOLD_CASE_LINE: &str = "# rewind: core.ignoreCase\n";

/// Whether a nested repository's rules say it matches regardless of case (`FOLD_CASE_LINE`).
pub fn nested_folds_case(exclude: Option<&str>) -> bool {
    exclude.is_some_and(|text| text.starts_with(FOLD_CASE_LINE))
}

/// A rules file's text without its comments and empty lines, which match nothing (a line that starts with
/// `#`; `\#` is a pattern, and so is any other line, kept as it is but for the `\r` of a CRLF line end,
/// which git drops: joined without it, the last line's would become part of its pattern).
fn rule_lines(text: &str) -> String {
    text.split('\n')
        .map(|line| line.strip_suffix('\r').unwrap_or(line))
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The rules hash of worktree directory `dir` (`a/b/`) whose parent's hash is `parent` and whose own
/// `.gitignore` text is `text`: it changes when any rule file from the root down to `dir` changes.
pub fn dir_rules_hash(parent: &[u8; 20], dir: &str, text: Option<&str>) -> [u8; 20] {
    let mut hasher = sha1::Sha1::new();
    hasher.update(parent);
    hash_text(&mut hasher, Some(dir));
    hash_text(&mut hasher, text);
    hasher.finalize().into()
}

/// Feeds an optional text to a hash unambiguously (absent, or length and bytes).
fn hash_text(hasher: &mut sha1::Sha1, text: Option<&str>) {
    match text {
        None => hasher.update([0]),
        Some(text) => {
            hasher.update([1]);
            hasher.update((text.len() as u64).to_le_bytes());
            hasher.update(text.as_bytes());
        }
    }
}

/// `a`, `a/b`, `a/b/c` for `a/b/c`.
pub(crate) fn ancestors_and_self(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/')
        .map(move |(i, _)| &path[..i])
        .chain((!path.is_empty()).then_some(path))
}

/// A rules file outside the tree (the global excludes file, an `info/exclude`), which git reads through a
/// symlink (a dotfile manager's `~/.config/git/ignore`, say); only the `.gitignore` files in and above
/// the tree are never followed (`read_gitignore`; review: a symlinked global file was read as none). A
/// missing file is none, and so is one that is not a regular file, and one this user may not read (a
/// `HOME` of another user's, mode 700, as `sudo -u` or a container's `--user` leave it): git warns of it
/// and goes on without its rules, and the snapshot is git's tree. One that cannot be looked at for
/// another reason (a path too long to name, an I/O error) is an error, as one that cannot be read is:
/// taken as no rules, the files it ignores would count as tracked content.
pub fn read_rules_following(path: &Path) -> GitResult<Option<String>> {
    let no_rules = |e: &std::io::Error| {
        crate::odb::gone(e)
            || crate::beneath::moved(e)
            || e.kind() == std::io::ErrorKind::PermissionDenied
    };
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => return Ok(None),
        Err(e) if no_rules(&e) => return Ok(None),
        Err(e) => return Err(GitError::io(path, e)),
    }
    match crate::odb::read_regular(path, true) {
        Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
        // Deleted, or no longer a regular file, since it was looked at: as one found so.
        Err(e) if no_rules(&e) || crate::odb::replaced_meanwhile(&e) => Ok(None),
        Err(e) => Err(GitError::io(path, e)),
    }
}

/// The `.gitignore` of directory `dir`, opened through a handle on the directory and never through a
/// symlink (git does not follow a symlinked `.gitignore`); none when it is missing or not a regular file,
/// and when `dir` is not a directory now (absent, a file, a symlink). The file's own path is never named
/// whole: a directory whose path is within a few bytes of `PATH_MAX` has its rules read, as the walk lists
/// it through handles and git names paths from the worktree's top (fuzz: the rules there were taken as
/// none, or the look failed the revert with "File name too long").
pub fn read_gitignore(dir: &Path) -> GitResult<Option<String>> {
    let Some(handle) = open_dir(dir)? else {
        return Ok(None);
    };
    let shown = || dir.join(".gitignore");
    // Looked at first: a FIFO, socket or device there is never opened (SPEC 2.2; review: a socket failed
    // the open with `ENXIO`, and a device's driver ran its open).
    match crate::beneath::lstat_at(&handle, ".gitignore") {
        Ok(stat) if rustix::fs::FileType::from_raw_mode(stat.st_mode).is_file() => {}
        Ok(_) => return Ok(None),
        Err(e) if crate::odb::gone(&e) => return Ok(None),
        Err(e) => return Err(GitError::io(&shown(), e)),
    }
    match read_in(&handle, ".gitignore") {
        Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
        // Gone, or no longer a regular file (a symlink: `ELOOP`), since it was looked at.
        Err(e) if crate::odb::gone(&e) || crate::odb::replaced_meanwhile(&e) => Ok(None),
        Err(e) => Err(GitError::io(&shown(), e)),
    }
}

/// The whole content of the regular file `name` of directory `dir` (a handle), opened without following
/// a symlink and never waited on when a FIFO (`Root::file_for_reading`).
fn read_in(dir: &impl std::os::fd::AsFd, name: &str) -> std::io::Result<Vec<u8>> {
    let mut file = crate::beneath::Root::file_for_reading(dir, name)?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut file, &mut bytes)?;
    Ok(bytes)
}

/// A handle on directory `dir` for the `*at` calls, without following a symlink at `dir` itself; none
/// when nothing stands there as a directory (absent, below a file, a file, a symlink, a symlink loop).
fn open_dir(dir: &Path) -> GitResult<Option<std::os::fd::OwnedFd>> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    // Without a trailing `/`, which would have a symlink there followed whatever the flags say (the walk
    // names its directories `a/b/`).
    let dir: std::path::PathBuf = dir.components().collect();
    match rustix::fs::open(&dir, flags, Mode::empty()) {
        Ok(handle) => Ok(Some(handle)),
        Err(e) => {
            let e = std::io::Error::from(e);
            if crate::odb::gone(&e) || crate::beneath::moved(&e) {
                Ok(None)
            } else {
                Err(GitError::io(&dir, e))
            }
        }
    }
}

fn global_excludes_path(
    excludes: &ExcludesFile,
    enclosing: Option<&Enclosing>,
    home: Option<&Path>,
) -> Option<PathBuf> {
    match excludes {
        ExcludesFile::None => None,
        ExcludesFile::Path(path) => Some(path.clone()),
        ExcludesFile::FromGitConfig => {
            let configured = crate::git_config::configured_excludes_file(enclosing, home);
            configured.or_else(|| crate::git_config::xdg_git_file(home, "ignore"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{read_gitignore, read_rules_following, rule_lines};

    /// A rules file that cannot be looked at is an error, not "no rules" (read as none, the files it
    /// ignores would be tracked content): here a path longer than `PATH_MAX`. Missing and not-a-directory
    /// paths still hold no rules.
    #[test]
    fn a_rules_file_that_cannot_be_looked_at_is_an_error_and_a_missing_one_holds_none() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let too_long = dir.path().join(vec!["x".repeat(249); 20].join("/"));
        assert!(read_rules_following(&too_long).is_err());
        assert!(read_gitignore(&too_long).is_err());
        std::fs::write(dir.path().join("file"), "f").expect("write");
        for absent in ["missing", "file/below", "missing/below"] {
            let path = dir.path().join(absent);
            assert_eq!(
                read_rules_following(&path).expect("no error"),
                None,
                "{absent}"
            );
            assert_eq!(read_gitignore(&path).expect("no error"), None, "{absent}");
        }
    }

    #[test]
    fn a_rules_files_comments_and_empty_lines_are_left_out_and_its_patterns_kept_as_they_are() {
        let text = "# git ls-files --others --exclude-from=.git/info/exclude\n\n*.ex\n\\#kept\n  \n!keep.ex\r\n#last";
        assert_eq!(rule_lines(text), "*.ex\n\\#kept\n  \n!keep.ex");
    }
}
