//! The `diff` attribute of `.gitattributes`, which decides, as in `git diff`, whether a file's change is
//! shown as text or as binary: unset (`-diff`, or the `binary` macro) makes it binary, set (`diff`) makes
//! it text even with a NUL byte; otherwise (unspecified, or a diff driver's name) a NUL byte in the first
//! 8,000 bytes does. It changes no snapshot (SPEC 2.1: no filter is ever applied), only how a change is
//! shown and counted, so that the counts are `git diff --numstat`'s (a lockfile marked `-diff` counts
//! as binary there).
//!
//! The attributes are read as git reads them for the worktree: the built-in `binary` macro, the system
//! file, the global one (`core.attributesFile`, or the XDG default), the `.gitattributes` files on disk
//! from the top of the repository (a subdirectory worktree's enclosing one; a nested repository's own
//! root for the files in it) down to each file's directory, a deeper one before a shallower one, then the
//! repository's `info/attributes`, which comes first of all. A file that cannot be read adds nothing, as
//! git only warns about it; an in-tree `.gitattributes` that is a symlink is not followed, as git does not
//! follow it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use gix::attrs::search::{MetadataCollection, Outcome};
use gix::attrs::{Search, StateRef};

use crate::config::ExcludesFile;
use crate::ignore::{Enclosing, enclosing_repository};

/// How a file's change is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiffAttribute {
    /// As its content says: binary with a NUL byte in the first 8,000 bytes.
    Auto,
    /// Binary (`-diff`, `binary`).
    Binary,
    /// Text, whatever its bytes (`diff`).
    Text,
}

/// The `diff` attribute of each of a set of paths (only those that are not `Auto` are kept).
#[derive(Debug, Default)]
pub struct DiffAttributes {
    set: HashMap<String, DiffAttribute>,
}

impl DiffAttributes {
    /// The attribute of each of `paths` (worktree-relative) in worktree `worktree`, with `global` the
    /// global attributes file; `home` is where its XDG default is looked for when `XDG_CONFIG_HOME` is not
    /// set.
    pub fn read<'a>(
        worktree: &Path,
        (global, home): (&ExcludesFile, Option<&Path>),
        paths: impl IntoIterator<Item = &'a str>,
    ) -> DiffAttributes {
        let mut reader = Reader::new(worktree, global, home);
        let Some(prefix) = reader.prefix.clone() else {
            return DiffAttributes::default();
        };
        // Each path under `top`, grouped by the root its attributes start from: `top`, or the nested
        // repository it lies in.
        let mut by_root: HashMap<String, Vec<(String, String)>> = HashMap::new();
        for path in paths {
            let full = format!("{prefix}{path}");
            let root = reader.root_of(&full);
            by_root
                .entry(root)
                .or_default()
                .push((path.to_owned(), full));
        }
        let mut set = HashMap::new();
        for (root, paths) in by_root {
            // A nested repository's own `core.ignoreCase`, as for its ignore rules.
            let folds = match root.as_str() {
                "" => reader.fold_case,
                root => reader.nested_folds_case(root),
            };
            let case = if folds {
                gix::glob::pattern::Case::Fold
            } else {
                gix::glob::pattern::Case::Sensitive
            };
            let Some((search, collection)) = reader.search_from(&root, &paths) else {
                continue;
            };
            let mut out = Outcome::default();
            for (path, full) in paths {
                let relative = match root.as_str() {
                    "" => full.as_str(),
                    root => full
                        .strip_prefix(root)
                        .map_or(full.as_str(), |rest| rest.trim_start_matches('/')),
                };
                out.initialize_with_selection(&collection, ["diff"]);
                search.pattern_matching_relative_path(relative.into(), case, Some(false), &mut out);
                let attribute = match out.iter_selected().next().map(|m| m.assignment.state) {
                    Some(StateRef::Unset) => DiffAttribute::Binary,
                    Some(StateRef::Set) => DiffAttribute::Text,
                    _ => DiffAttribute::Auto,
                };
                if attribute != DiffAttribute::Auto {
                    set.insert(path, attribute);
                }
            }
        }
        DiffAttributes { set }
    }

    /// The attribute of `path` (one of those read).
    pub fn of(&self, path: &str) -> DiffAttribute {
        self.set.get(path).copied().unwrap_or(DiffAttribute::Auto)
    }
}

/// What the attributes of the paths of one worktree are read with.
struct Reader {
    /// The top of the repository (the worktree without one).
    top: PathBuf,
    /// The worktree's path under `top` (`""` or `sub/dir/`); none when it cannot be written as one (a
    /// name that is not UTF-8): every file is then `Auto`.
    prefix: Option<String>,
    enclosing: Option<Enclosing>,
    /// The system and global files' texts, with their paths.
    globals: Vec<(PathBuf, Vec<u8>)>,
    /// By directory under `top`, whether it is a nested repository's root, and then whether its own
    /// configuration sets `core.ignoreCase`.
    roots: HashMap<String, Option<bool>>,
    /// Whether patterns match regardless of case (`core.ignoreCase`, as for the ignore rules).
    fold_case: bool,
}

impl Reader {
    fn new(worktree: &Path, global: &ExcludesFile, home: Option<&Path>) -> Reader {
        let enclosing = enclosing_repository(worktree);
        let top = enclosing
            .as_ref()
            .map_or_else(|| worktree.to_path_buf(), |repo| repo.root.clone());
        let prefix = match worktree.strip_prefix(&top) {
            Ok(rel) if rel.as_os_str().is_empty() => Some(String::new()),
            Ok(rel) => rel.to_str().map(|rel| format!("{rel}/")),
            Err(_) => None,
        };
        let mut files = Vec::new();
        if !env_true("GIT_ATTR_NOSYSTEM") {
            // The user's git's own, as git reads one alone (diff review: every candidate was read,
            // and a `-diff` in another installation's file marked a file binary).
            files.push(crate::git_config::user_system_file("gitattributes"));
        }
        if let Some(global) = global_attributes_path(global, enclosing.as_ref(), home, &top) {
            files.push(global);
        }
        // Read without waiting (a FIFO there is not opened for good) and each on its own: one that cannot
        // be read adds nothing, as git only warns about it (review: one unreadable file turned every
        // attribute off, and a FIFO hung every diff).
        let globals = files
            .into_iter()
            .filter_map(|file| {
                let text = crate::odb::read_regular(&file, true).ok()?;
                Some((file, text))
            })
            .collect();
        let fold_case = crate::git_config::configured_ignore_case(enclosing.as_ref(), home);
        Reader {
            top,
            prefix,
            enclosing,
            globals,
            roots: HashMap::new(),
            fold_case,
        }
    }

    /// The root the attributes of `full` (a path under `top`) start from: `""` (top), or the deepest
    /// nested repository below the worktree's root that holds it.
    fn root_of(&mut self, full: &str) -> String {
        let worktree_depth = self.prefix.as_deref().map_or(0, |p| p.matches('/').count());
        let mut root = String::new();
        let mut at = String::new();
        let dirs: Vec<&str> = full.split('/').collect();
        for (depth, component) in dirs[..dirs.len().saturating_sub(1)].iter().enumerate() {
            if !at.is_empty() {
                at.push('/');
            }
            at.push_str(component);
            if depth + 1 > worktree_depth && self.is_repository_root(&at) {
                root = at.clone();
            }
        }
        root
    }

    /// The search for `paths` (each `(path, under top)`), whose attributes start from `root`: the
    /// built-in macro and the global files, then every `.gitattributes` from `root` down to each path's
    /// directory, a shallower one before a deeper one (which comes first), then, from `top`, the
    /// repository's `info/attributes`.
    fn search_from(
        &mut self,
        root: &str,
        paths: &[(String, String)],
    ) -> Option<(Search, MetadataCollection)> {
        let mut collection = MetadataCollection::default();
        let mut search = Search::default();
        search
            .add_patterns_buffer(
                b"[attr]binary -diff -merge -text",
                "[builtin]".into(),
                None,
                &mut collection,
                true,
            )
            .ok()?;
        for (file, text) in &self.globals {
            search
                .add_patterns_buffer(text, file.clone(), None, &mut collection, true)
                .ok()?;
        }
        let mut dirs: Vec<String> = vec![root.to_owned()];
        for (_, full) in paths {
            let dir = full.rsplit_once('/').map_or("", |(dir, _)| dir);
            let below = match root {
                "" => dir,
                root => match dir.strip_prefix(root) {
                    Some(rest) => rest.trim_start_matches('/'),
                    None => continue,
                },
            };
            let mut at = root.to_owned();
            for component in below.split('/').filter(|c| !c.is_empty()) {
                if !at.is_empty() {
                    at.push('/');
                }
                at.push_str(component);
                dirs.push(at.clone());
            }
        }
        dirs.sort_by_key(|dir| {
            (
                dir.matches('/').count() + usize::from(!dir.is_empty()),
                dir.clone(),
            )
        });
        dirs.dedup();
        let base = self.top.join(root);
        for dir in &dirs {
            let source = self.top.join(dir).join(".gitattributes");
            // Not followed when a symlink, as git does not follow an in-tree `.gitattributes`.
            if let Ok(text) = crate::odb::read_regular(&source, false) {
                search
                    .add_patterns_buffer(&text, source, Some(&base), &mut collection, dir == root)
                    .ok()?;
            }
        }
        if root.is_empty()
            && let Some(repo) = &self.enclosing
        {
            let info = repo.common_dir.join("info").join("attributes");
            if let Ok(text) = crate::odb::read_regular(&info, true) {
                search
                    .add_patterns_buffer(&text, info, None, &mut collection, true)
                    .ok()?;
            }
        }
        Some((search, collection))
    }

    /// Whether directory `dir` (under `top`) is a nested repository's root: its `.git` makes it one
    /// as it makes it one for the ignore rules (an empty `.git`, or a gitfile naming nothing, does not).
    fn is_repository_root(&mut self, dir: &str) -> bool {
        self.nested_root(dir).is_some()
    }

    /// Whether the nested repository rooted at `dir` matches regardless of case.
    fn nested_folds_case(&mut self, dir: &str) -> bool {
        self.nested_root(dir).unwrap_or(self.fold_case)
    }

    /// When directory `dir` is a nested repository's root: whether its own configuration sets
    /// `core.ignoreCase`.
    fn nested_root(&mut self, dir: &str) -> Option<bool> {
        if let Some(known) = self.roots.get(dir) {
            return *known;
        }
        let found = match crate::ignore::nested_repository_exclude(&self.top.join(dir)) {
            Ok(Some(exclude)) => Some(crate::ignore::nested_folds_case(exclude.as_deref())),
            _ => None,
        };
        self.roots.insert(dir.to_owned(), found);
        found
    }
}

/// Whether environment variable `name` is set to a true value, as git reads a boolean one.
pub(crate) fn env_true(name: &str) -> bool {
    std::env::var(name).is_ok_and(|value| {
        matches!(
            value.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        )
    })
}

/// The global attributes file: `core.attributesFile` (a relative one from `top`, where git runs), or
/// `$XDG_CONFIG_HOME/git/attributes`, or `~/.config/git/attributes`. None when the key is set empty.
fn global_attributes_path(
    global: &ExcludesFile,
    enclosing: Option<&Enclosing>,
    home: Option<&Path>,
    top: &Path,
) -> Option<PathBuf> {
    let configured = match global {
        ExcludesFile::None => return None,
        ExcludesFile::Path(path) => return Some(path.clone()),
        ExcludesFile::FromGitConfig => {
            crate::git_config::configured_attributes_file(enclosing, home)
        }
    };
    match configured {
        Some(path) if path.as_os_str().is_empty() => None,
        Some(path) => Some(top.join(path)),
        None => crate::git_config::xdg_git_file(home, "attributes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("a directory");
        }
        std::fs::write(path, text).expect("a file");
    }

    /// A nested repository's files follow its own `.gitattributes` (from its root, where macros may be
    /// defined), not the enclosing worktree's; the global file applies everywhere, below the in-tree
    /// files. (The git oracle cannot show this: git adds a nested repository as a link, not its files.)
    #[test]
    fn a_nested_repository_s_files_follow_its_own_attributes_and_the_global_file_applies_everywhere()
     {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let wt = std::fs::canonicalize(dir.path()).expect("canonical");
        write(&wt, ".gitattributes", "*.txt -diff\n");
        write(&wt, "nested/.git/HEAD", "ref: refs/heads/main\n");
        for git_dir in ["nested/.git/objects", "nested/.git/refs"] {
            std::fs::create_dir_all(wt.join(git_dir)).expect("a git directory's layout");
        }
        write(
            &wt,
            "nested/.gitattributes",
            "[attr]plain -diff\nb.txt diff\nc.txt plain\n",
        );
        let global = wt.join("global-attributes");
        write(
            &wt,
            "global-attributes",
            "*.bin diff\n*.md -diff\nb.txt -diff\n",
        );
        let paths = [
            "a.txt",
            "nested/a.txt",
            "nested/b.txt",
            "nested/c.txt",
            "x.bin",
            "doc.md",
            "nested/doc.md",
            "other",
        ];
        let attributes = DiffAttributes::read(&wt, (&ExcludesFile::Path(global), None), paths);
        let of = |path: &str| attributes.of(path);
        assert_eq!(of("a.txt"), DiffAttribute::Binary);
        assert_eq!(
            of("nested/a.txt"),
            DiffAttribute::Auto,
            "not the outer file's"
        );
        assert_eq!(
            of("nested/b.txt"),
            DiffAttribute::Text,
            "in-tree before global"
        );
        assert_eq!(of("nested/c.txt"), DiffAttribute::Binary, "its own macro");
        assert_eq!(of("x.bin"), DiffAttribute::Text);
        assert_eq!(of("doc.md"), DiffAttribute::Binary);
        assert_eq!(of("nested/doc.md"), DiffAttribute::Binary);
        assert_eq!(of("other"), DiffAttribute::Auto);
        let none = DiffAttributes::read(&wt, (&ExcludesFile::None, None), ["x.bin"]);
        assert_eq!(none.of("x.bin"), DiffAttribute::Auto, "no global file");
    }

    /// A global file that cannot be read (a directory, a symlink that loops) or would block (a FIFO) adds
    /// nothing and stops nothing: the in-tree files still apply, and no read waits (review: a FIFO hung
    /// every diff, and an unreadable file turned every attribute off). A `.git` that makes no repository
    /// (empty, or a gitfile naming nothing) does not restart the chain.
    #[test]
    fn an_unreadable_global_file_is_passed_over_and_a_dot_git_that_is_no_repository_changes_nothing()
     {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let wt = std::fs::canonicalize(dir.path()).expect("canonical");
        write(&wt, ".gitattributes", "*.lock -diff\n");
        std::fs::create_dir_all(wt.join("empty/.git")).expect("an empty .git");
        write(&wt, "junk/.git", "junk\n");
        let fifo = wt.join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo");
        assert!(made.success());
        let looping = wt.join("loop");
        std::os::unix::fs::symlink(&looping, &looping).expect("a symlink to itself");
        let paths = ["top.lock", "empty/a.lock", "junk/b.lock"];
        for global in [fifo, looping, wt.join("empty")] {
            let attributes =
                DiffAttributes::read(&wt, (&ExcludesFile::Path(global.clone()), None), paths);
            for path in paths {
                assert_eq!(
                    attributes.of(path),
                    DiffAttribute::Binary,
                    "{path} with {}",
                    global.display()
                );
            }
        }
    }
}
