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
        let mut set = HashMap::new();
        for path in paths {
            let attribute = reader.attribute(path);
            if attribute != DiffAttribute::Auto {
                set.insert(path.to_owned(), attribute);
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
    /// The built-in macro, the system file and the global one.
    globals: Option<(Search, MetadataCollection)>,
    /// By directory under `top` (`""`, `a/b`), the text of its `.gitattributes` (none: absent).
    texts: HashMap<String, Option<Vec<u8>>>,
    /// By directory under `top`, whether it is a nested repository's root.
    roots: HashMap<String, bool>,
    /// By directory under `top`, the search for the files in it, and the directory its patterns are
    /// relative to.
    searches: HashMap<String, (Search, MetadataCollection, String)>,
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
        if std::env::var_os("GIT_ATTR_NOSYSTEM").is_none() {
            files.push(PathBuf::from("/etc/gitattributes"));
        }
        if let Some(global) = global_attributes_path(global, enclosing.as_ref(), home, &top) {
            files.push(global);
        }
        let mut collection = MetadataCollection::default();
        let globals = Search::new_globals(files, &mut Vec::new(), &mut collection)
            .ok()
            .map(|search| (search, collection));
        Reader {
            top,
            prefix,
            enclosing,
            globals,
            texts: HashMap::new(),
            roots: HashMap::new(),
            searches: HashMap::new(),
        }
    }

    fn attribute(&mut self, path: &str) -> DiffAttribute {
        let Some(prefix) = &self.prefix else {
            return DiffAttribute::Auto;
        };
        let full = format!("{prefix}{path}");
        let dir = full.rsplit_once('/').map_or("", |(dir, _)| dir).to_owned();
        if !self.searches.contains_key(&dir) {
            let Some(built) = self.search_for(&dir) else {
                return DiffAttribute::Auto;
            };
            self.searches.insert(dir.clone(), built);
        }
        let Some((search, collection, base)) = self.searches.get(&dir) else {
            return DiffAttribute::Auto;
        };
        let relative = full
            .strip_prefix(base.as_str())
            .map_or(full.as_str(), |rest| rest.trim_start_matches('/'));
        let mut out = Outcome::default();
        out.initialize_with_selection(collection, ["diff"]);
        search.pattern_matching_relative_path(
            relative.into(),
            gix::glob::pattern::Case::Sensitive,
            Some(false),
            &mut out,
        );
        match out.iter_selected().next().map(|m| m.assignment.state) {
            Some(StateRef::Unset) => DiffAttribute::Binary,
            Some(StateRef::Set) => DiffAttribute::Text,
            _ => DiffAttribute::Auto,
        }
    }

    /// The search for the files of directory `dir` (under `top`), and the directory its patterns are
    /// relative to: `top`, or the nested repository `dir` lies in.
    fn search_for(&mut self, dir: &str) -> Option<(Search, MetadataCollection, String)> {
        let (mut search, mut collection) = self.globals.clone()?;
        let mut chain: Vec<String> = vec![String::new()];
        if !dir.is_empty() {
            let mut at = String::new();
            for component in dir.split('/') {
                if !at.is_empty() {
                    at.push('/');
                }
                at.push_str(component);
                chain.push(at.clone());
            }
        }
        // A nested repository below the worktree's top starts the chain again (its files follow its own
        // attributes, not the enclosing repository's).
        let worktree_depth = self.prefix.as_deref().map_or(0, |p| p.matches('/').count());
        let start = (1..chain.len())
            .rev()
            .find(|&at| at > worktree_depth && self.is_repository_root(&chain[at]))
            .unwrap_or(0);
        let base = chain[start].clone();
        let root = self.top.join(&base);
        for (at, dir) in chain.iter().enumerate().skip(start) {
            if let Some(text) = self.text_of(dir) {
                let source = self.top.join(dir).join(".gitattributes");
                // Macros only in the top-level file.
                search
                    .add_patterns_buffer(&text, source, Some(&root), &mut collection, at == start)
                    .ok()?;
            }
        }
        if start == 0
            && let Some(repo) = &self.enclosing
        {
            let info = repo.common_dir.join("info").join("attributes");
            if let Ok(text) = crate::odb::read_regular(&info, true) {
                search
                    .add_patterns_buffer(&text, info, None, &mut collection, true)
                    .ok()?;
            }
        }
        Some((search, collection, base))
    }

    fn text_of(&mut self, dir: &str) -> Option<Vec<u8>> {
        if let Some(known) = self.texts.get(dir) {
            return known.clone();
        }
        let path = self.top.join(dir).join(".gitattributes");
        let text = crate::odb::read_regular(&path, false).ok();
        self.texts.insert(dir.to_owned(), text.clone());
        text
    }

    fn is_repository_root(&mut self, dir: &str) -> bool {
        if let Some(known) = self.roots.get(dir) {
            return *known;
        }
        let found = std::fs::symlink_metadata(self.top.join(dir).join(".git")).is_ok();
        self.roots.insert(dir.to_owned(), found);
        found
    }
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
}
