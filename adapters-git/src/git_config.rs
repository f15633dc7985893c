//! `core.excludesFile`, `core.attributesFile` and `core.ignoreCase` as git's configuration sets them, read
//! with gix (the system layer from the file the user's git reads, `user_system_file`; no git is run) and
//! kept in the process while every file they could come from is unchanged.
//!
//! Reading it opens the enclosing repository with gix (its configuration files, the global and system
//! ones; a repository gix cannot open, one of SHA-256 objects, has the same files read without it):
//! ~0.3 ms, and every store call that applies ignore rules needs it (a revert two, a track one).
//! What is kept is checked at each use against a stamp: the stat data (device, inode, size, modification
//! and change times) of every file git's configuration could be read from (system, global and XDG files,
//! the repository's `config` and `config.worktree`, its `HEAD` for `onbranch:` includes, every file
//! the configuration actually came from, includes too, and every file an `include` or `includeIf` names,
//! also one missing or empty then), whether each exists, and the environment variables
//! that choose or add configuration (`GIT_*`, `HOME`, `XDG_CONFIG_HOME`). A file modified within the last
//! second is not trusted to have changed its stat data, as a racy index entry in git: nothing is kept then.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::ignore::Enclosing;

/// How recent a modification makes a configuration file's stat data untrustworthy, in nanoseconds.
const RACY_NS: i128 = 1_000_000_000;

/// How many repositories' values are kept.
const KEPT_MAX: usize = 16;

/// What a value was read from, as it was.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp {
    files: Vec<(PathBuf, Option<FileStamp>)>,
    env: Vec<(OsString, OsString)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

struct Kept {
    /// The repository's root (none outside any) and the home directory the values were read with.
    key: (Option<PathBuf>, Option<PathBuf>),
    stamp: Stamp,
    values: Values,
}

/// The values read, all three from one opening of the configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Values {
    excludes_file: Option<PathBuf>,
    attributes_file: Option<PathBuf>,
    ignore_case: bool,
}

static KEPT: Mutex<Vec<Kept>> = Mutex::new(Vec::new());

/// `core.excludesFile` of the repository `enclosing` (with its global and system configuration), or of
/// the global and system configuration alone when the worktree is in no repository; `home` expands `~`
/// in the latter case.
pub fn configured_excludes_file(
    enclosing: Option<&Enclosing>,
    home: Option<&Path>,
) -> Option<PathBuf> {
    configured(enclosing, home).excludes_file
}

/// git's default for a global file of its own (`ignore`, `attributes`): `$XDG_CONFIG_HOME/git/NAME` when
/// that variable is an absolute path, else `~/.config/git/NAME` (`home`).
pub fn xdg_git_file(home: Option<&Path>, name: &str) -> Option<PathBuf> {
    let config_home = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| home.map(|h| h.join(".config")))?;
    Some(config_home.join("git").join(name))
}

/// `core.attributesFile`, read as `configured_excludes_file` reads `core.excludesFile`.
pub fn configured_attributes_file(
    enclosing: Option<&Enclosing>,
    home: Option<&Path>,
) -> Option<PathBuf> {
    configured(enclosing, home).attributes_file
}

/// `core.ignoreCase` of the repository `enclosing` (with its global and system configuration), or of the
/// global and system configuration alone when the worktree is in no repository: whether ignore and
/// attribute patterns match regardless of case, as git then matches them. `git init` sets it on a
/// filesystem that ignores case (macOS, a Windows drive under WSL); unset, or a value that is no boolean,
/// is false.
pub fn configured_ignore_case(enclosing: Option<&Enclosing>, home: Option<&Path>) -> bool {
    configured(enclosing, home).ignore_case
}

/// The values the configuration sets, kept while their sources are unchanged.
fn configured(enclosing: Option<&Enclosing>, home: Option<&Path>) -> Values {
    let key = (
        enclosing.map(|e| e.root.clone()),
        home.map(Path::to_path_buf),
    );
    {
        let kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = kept.iter().find(|k| k.key == key)
            && Stamp::of(found.stamp.files.iter().map(|(p, _)| p.clone())).as_ref()
                == Some(&found.stamp)
        {
            return found.values.clone();
        }
    }
    let (values, sources) = read(enclosing, home);
    let mut files = candidates(enclosing, home);
    for source in sources {
        if !files.contains(&source) {
            files.push(source);
        }
    }
    if let Some(stamp) = Stamp::of(files.into_iter()) {
        let mut kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
        kept.retain(|k| k.key != key);
        if kept.len() >= KEPT_MAX {
            kept.remove(0);
        }
        kept.push(Kept {
            key,
            stamp,
            values: values.clone(),
        });
    }
    values
}

/// The values read with gix, and the files the configuration came from, with every file an `include` or
/// `includeIf` names (whatever its condition, also when it is missing or empty and so gave no section:
/// one made or filled later changes the value; review).
///
/// gix is given the system file the user's git reads (`system_config_file`), not its own default of
/// `/etc/gitconfig` alone, and runs no git: `gix::config` reads the files outside a repository where
/// `File::from_globals` asked the `git` on `PATH` where its installation's file is (diff review: a
/// worktree in no repository ran `git config -l` at every track).
fn read(enclosing: Option<&Enclosing>, home: Option<&Path>) -> (Values, Vec<PathBuf>) {
    let home_dir = home
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("HOME").map(PathBuf::from));
    let sources = |file: &gix::config::File| -> Vec<PathBuf> {
        let mut sources = Vec::new();
        for section in file.sections() {
            let Some(from) = section.meta().path.clone() else {
                continue;
            };
            let name = section.header().name().to_string().to_ascii_lowercase();
            if name == "include" || name == "includeif" {
                for target in section.values("path") {
                    if let Some(target) =
                        include_target(&target.to_string(), &from, home_dir.as_deref())
                    {
                        sources.push(target);
                    }
                }
            }
            sources.push(from);
        }
        sources
    };
    let mut options = gix::open::Options::default();
    if let Some(system) = system_config_file() {
        options = options.system_config_path(system);
    }
    // What `git -c` hands to the programs it runs (an alias, a hook), which gix does not read itself.
    let parameters = config_parameters();
    if !parameters.is_empty() {
        options = options.cli_overrides(parameters);
    }
    // git takes an empty `XDG_CONFIG_HOME` as unset (`~/.config/git/config` is read); gix would read
    // `git/config` under the current directory (config review).
    if std::env::var_os("XDG_CONFIG_HOME").is_some_and(|value| value.is_empty()) {
        let mut permissions = gix::open::Permissions::default();
        permissions.env.xdg_config_home = gix::sec::Permission::Deny;
        options = options.permissions(permissions);
    }
    match enclosing {
        Some(repo) => match gix::open_opts(&repo.found_at, options.clone()) {
            Ok(opened) => {
                let config = opened.config_snapshot();
                let path = |name: &str| {
                    let value = config.trusted_path(name).ok().flatten();
                    set_empty(config.plumbing(), name).or(value)
                };
                let values = Values {
                    excludes_file: path("core.excludesFile"),
                    attributes_file: path("core.attributesFile"),
                    ignore_case: config.boolean("core.ignoreCase").unwrap_or(false),
                };
                (values, sources(config.plumbing()))
            }
            // A repository gix cannot open (one of SHA-256 objects, say): its configuration files are
            // still read, the global ones and its own (review: a SHA-256 repository's `core.excludesFile`
            // and `core.ignoreCase`, global or its own, were not applied, and the files they ignore were
            // snapshotted and reverted).
            Err(_) => match gix::config(Some(&repo.git_dir), &options) {
                Ok(mut file) => {
                    // Its own files over the global ones, and the `GIT_CONFIG_COUNT` settings, which
                    // `gix::config` put last, over them again, as git orders them (a failed append
                    // leaves the settings before it).
                    if let Some(own) = repository_files(repo, home_dir.as_deref()) {
                        let _ = file.append(own);
                    }
                    if let Ok(overrides) = gix::config::File::from_environment_overrides() {
                        let _ = file.append(overrides);
                    }
                    (values_of(&file, home), sources(&file))
                }
                Err(_) => (Values::default(), Vec::new()),
            },
        },
        None => match gix::config(None, &options) {
            Ok(file) => (values_of(&file, home), sources(&file)),
            Err(_) => (Values::default(), Vec::new()),
        },
    }
}

/// The settings `GIT_CONFIG_PARAMETERS` holds, as git reads them (`'key'='value'`, or the older
/// `'key=value'`, shell-quoted and separated by spaces), each as `key=value` (`key` alone, an implicit
/// true) for gix's command-line overrides; none when it is unset or malformed (git refuses it then).
fn config_parameters() -> Vec<gix::bstr::BString> {
    let Some(value) = std::env::var_os("GIT_CONFIG_PARAMETERS") else {
        return Vec::new();
    };
    parse_config_parameters(value.as_encoded_bytes()).unwrap_or_default()
}

/// `config_parameters` of the variable's bytes; none when malformed.
fn parse_config_parameters(mut rest: &[u8]) -> Option<Vec<gix::bstr::BString>> {
    let mut settings = Vec::new();
    loop {
        rest = rest.trim_ascii_start();
        if rest.is_empty() {
            return Some(settings);
        }
        let (key, after) = sq_dequote_step(rest)?;
        rest = after;
        let mut setting = key;
        if let Some(after) = rest.strip_prefix(b"=") {
            // The newer form, `'key'='value'`, or `'key'=` for an implicit true.
            if after.first() == Some(&b'\'') {
                let (value, after) = sq_dequote_step(after)?;
                setting.push(b'=');
                setting.extend_from_slice(&value);
                rest = after;
            } else {
                rest = after;
            }
        }
        if rest.first().is_some_and(|b| !b.is_ascii_whitespace()) {
            return None;
        }
        settings.push(setting.into());
    }
}

/// One shell-quoted word at the start of `text` (`'…'`, a quote inside written `'\''`), and what follows
/// it; none when `text` does not start with one or it is not closed.
fn sq_dequote_step(text: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let mut rest = text.strip_prefix(b"'")?;
    let mut word = Vec::new();
    loop {
        let end = rest.iter().position(|&b| b == b'\'')?;
        word.extend_from_slice(&rest[..end]);
        rest = &rest[end + 1..];
        // `'\''` and `'\!'` stand for a quote and an exclamation mark inside the word.
        match rest {
            [b'\\', c @ (b'\'' | b'!'), b'\'', after @ ..] => {
                word.push(*c);
                rest = after;
            }
            _ => return Some((word, rest)),
        }
    }
}

/// The values `file` sets, its paths interpolated (`~/` under `home`).
fn values_of(file: &gix::config::File, home: Option<&Path>) -> Values {
    let path = |name: &str| {
        let value = file.path(name).and_then(|value| {
            value
                .interpolate(gix::config::path::interpolate::Context {
                    home_dir: home,
                    ..Default::default()
                })
                .ok()
        });
        set_empty(file, name).or(value)
    };
    Values {
        excludes_file: path("core.excludesFile"),
        attributes_file: path("core.attributesFile"),
        ignore_case: file
            .boolean("core.ignoreCase")
            .ok()
            .flatten()
            .unwrap_or(false),
    }
}

/// A repository's own configuration files, for one gix cannot open: its `config`, and its
/// `config.worktree` where `extensions.worktreeConfig` asks for it, includes followed (`includeIf
/// "gitdir:…"` and `"onbranch:…"` judged by its git dir and its `HEAD`). None when they cannot be read
/// or parsed.
fn repository_files(repo: &Enclosing, home: Option<&Path>) -> Option<gix::config::File> {
    use gix::config::Source;
    let local = repo.common_dir.join("config");
    let worktree_config = gix::config::File::from_path_no_includes(local.clone(), Source::Local)
        .ok()
        .and_then(|local| local.boolean("extensions.worktreeConfig").ok().flatten())
        .unwrap_or(false);
    let mut metas = vec![gix::config::file::Metadata::from(Source::Local).at(local)];
    if worktree_config {
        metas.push(
            gix::config::file::Metadata::from(Source::Worktree)
                .at(repo.git_dir.join("config.worktree")),
        );
    }
    metas.retain(|meta| meta.path.as_deref().is_some_and(Path::is_file));
    let head = std::fs::read_to_string(repo.git_dir.join("HEAD")).unwrap_or_default();
    let branch = head
        .strip_prefix("ref: ")
        .and_then(|name| gix::refs::FullName::try_from(name.trim()).ok());
    let options = gix::config::file::init::Options {
        includes: gix::config::file::includes::Options::follow(
            gix::config::path::interpolate::Context {
                home_dir: home,
                ..Default::default()
            },
            gix::config::file::includes::conditional::Context {
                git_dir: Some(&repo.git_dir),
                branch_name: branch.as_ref().map(|name| name.as_ref()),
            },
        ),
        ..Default::default()
    };
    gix::config::File::from_paths_metadata(metas, options)
        .ok()
        .map(Option::unwrap_or_default)
}

/// The file an include's `path` names, as git finds it: `~/` under the home directory, a relative path
/// from the directory of the file that includes it.
fn include_target(path: &str, from: &Path, home: Option<&Path>) -> Option<PathBuf> {
    if path.is_empty() {
        return None;
    }
    if let Some(rest) = path.strip_prefix("~/") {
        return home.map(|home| home.join(rest));
    }
    let path = Path::new(path);
    if path.is_absolute() {
        return Some(path.to_path_buf());
    }
    from.parent().map(|dir| dir.join(path))
}

/// An empty path when the key (`core.excludesFile`, say) is set to the empty string: git then reads no
/// such global file at all (the empty path cannot be opened), where an unset key means the XDG default.
fn set_empty(file: &gix::config::File, name: &str) -> Option<PathBuf> {
    file.string(name)
        .filter(|value| value.is_empty())
        .map(|_| PathBuf::new())
}

/// Where git's system-wide file `name` (`gitconfig`, `gitattributes`) may be, whether it exists or not:
/// `/etc/NAME`, and `PREFIX/etc/NAME` for each `git` on `PATH` that lies at `PREFIX/bin/git` (as found,
/// and with symlinks resolved) with a prefix other than `/usr` or `/`. git's system directory is its
/// build's `$(prefix)/etc`, `/etc` only for a prefix of `/usr`: a git built into `/usr/local`, or
/// Homebrew's, reads `/usr/local/etc/gitattributes` or `/opt/homebrew/etc/gitattributes` and not `/etc`'s
/// (seed review: a filter declared there was not seen, and a filtered file was seeded from the index).
/// Found without running git (no git subprocess in the product); every candidate is returned, so a check
/// that must not miss a filter reads them all.
pub fn system_files(name: &str) -> Vec<PathBuf> {
    let mut files = vec![Path::new("/etc").join(name)];
    for git in gits_on_path() {
        for file in prefix_files(&git, name) {
            if !files.contains(&file) {
                files.push(file);
            }
        }
    }
    files
}

/// The system file `name` of the git the user runs (the first executable `git` on `PATH`), as far as
/// rewind can tell without running it: the first that exists of `PREFIX/etc/NAME` for the prefix the
/// binary lies at with symlinks resolved, of the one it is found at on `PATH` (Homebrew's
/// `/opt/homebrew/bin/git` is a link into its cellar; it reads `/opt/homebrew/etc`), and `/etc/NAME`
/// (where distributions' gits, and Nix's, read theirs). git reads its build's own file alone (its
/// `sysconfdir`, compiled in: `/etc` for a prefix of `/usr`), which only git can say; a file that exists at
/// such a prefix is taken to be that git's. A value is read from this one (an ignore rule, a `diff`
/// attribute), where `system_files`' union serves a check that must not miss one.
pub fn user_system_file(name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let etc = Path::new("/etc").join(name);
    // As a shell finds it: a file named `git` that is not executable is passed over (review).
    let git = gits_on_path().find(|git| {
        std::fs::metadata(git).is_ok_and(|meta| meta.permissions().mode() & 0o111 != 0)
    });
    let mut candidates = git.map(|git| prefix_files(&git, name)).unwrap_or_default();
    candidates.reverse();
    candidates.push(etc.clone());
    candidates
        .into_iter()
        .find(|file| file.exists())
        .unwrap_or(etc)
}

/// Each file named `git` in an absolute directory of `PATH`, in order.
fn gits_on_path() -> impl Iterator<Item = PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join("git"))
        .filter(|git| git.is_file())
        .collect::<Vec<_>>()
        .into_iter()
}

/// The system file `name` of a git at `git` (as found, then with symlinks resolved) that lies at
/// `PREFIX/bin/git`: `PREFIX/etc/NAME`, or `/etc/NAME` for a prefix of `/usr` or `/`; as found first.
fn prefix_files(git: &Path, name: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for found in [Some(git.to_path_buf()), std::fs::canonicalize(git).ok()]
        .into_iter()
        .flatten()
    {
        let prefix = found
            .parent()
            .filter(|bin| bin.file_name().is_some_and(|n| n == "bin"))
            .and_then(Path::parent);
        if let Some(prefix) = prefix {
            let file = if prefix == Path::new("/usr") || prefix == Path::new("/") {
                Path::new("/etc").join(name)
            } else {
                prefix.join("etc").join(name)
            };
            if !files.contains(&file) {
                files.push(file);
            }
        }
    }
    files
}

/// The system configuration file as the environment chooses it: none (`GIT_CONFIG_NOSYSTEM`), the one
/// `GIT_CONFIG_SYSTEM` names, or git's own (`None` here).
fn system_config_by_env() -> Option<Option<PathBuf>> {
    if crate::attributes::env_true("GIT_CONFIG_NOSYSTEM") {
        return Some(None);
    }
    std::env::var_os("GIT_CONFIG_SYSTEM").map(|file| Some(PathBuf::from(file)))
}

/// The one system configuration file the user's git reads: the environment's choice, else its own
/// (`user_system_file`).
fn system_config_file() -> Option<PathBuf> {
    system_config_by_env().unwrap_or_else(|| Some(user_system_file("gitconfig")))
}

/// The system configuration files git may read: the environment's choice, else every candidate
/// (`system_files`).
fn system_config_files() -> Vec<PathBuf> {
    match system_config_by_env() {
        Some(chosen) => chosen.into_iter().collect(),
        None => system_files("gitconfig"),
    }
}

/// Every system configuration file git may read that exists (`system_config_files`), each read once
/// without waiting (a FIFO there is not opened for good) and parsed without its includes; an error when
/// one cannot be read or parsed, or includes other files (it may then set anything; diff review: a
/// setting in an included file was not seen).
pub(crate) fn system_configs() -> Result<Vec<gix::config::File>, ()> {
    let mut configs = Vec::new();
    for file in system_config_files() {
        let bytes = match crate::odb::read_regular(&file, true) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => return Err(()),
        };
        let config = gix::config::File::from_bytes_no_includes(
            &bytes,
            gix::config::file::Metadata::from(gix::config::Source::System).at(&file),
            gix::config::file::init::Options::default(),
        )
        .map_err(|_| ())?;
        let includes = config.sections().any(|section| {
            let name = section.header().name().to_string().to_ascii_lowercase();
            name == "include" || name == "includeif"
        });
        if includes {
            return Err(());
        }
        configs.push(config);
    }
    Ok(configs)
}

/// Every file git reads its configuration from for this repository, whether it exists or not.
fn candidates(enclosing: Option<&Enclosing>, home: Option<&Path>) -> Vec<PathBuf> {
    let var = |name: &str| std::env::var_os(name).map(PathBuf::from);
    let home = home.map(Path::to_path_buf).or_else(|| var("HOME"));
    let mut files = vec![PathBuf::from("/etc/gitconfig")];
    for file in system_config_files() {
        if !files.contains(&file) {
            files.push(file);
        }
    }
    if let Some(global) = var("GIT_CONFIG_GLOBAL") {
        files.push(global);
    }
    if let Some(home) = &home {
        files.push(home.join(".gitconfig"));
        files.push(home.join(".config/git/config"));
    }
    if let Some(xdg) = var("XDG_CONFIG_HOME") {
        files.push(xdg.join("git/config"));
    }
    if let Some(repo) = enclosing {
        files.push(repo.common_dir.join("config"));
        files.push(repo.git_dir.join("config.worktree"));
        files.push(repo.git_dir.join("HEAD"));
    }
    files
}

impl Stamp {
    /// The stamp of `files` and the environment now; none when a file was modified too recently to tell a
    /// later change by its stat data.
    fn of(files: impl Iterator<Item = PathBuf>) -> Option<Stamp> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as i128)
            .unwrap_or(0);
        let mut stamped = Vec::new();
        for path in files {
            let stamp = std::fs::metadata(&path).ok().map(|meta| FileStamp {
                dev: meta.dev(),
                ino: meta.ino(),
                size: meta.size(),
                mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
                ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
            });
            if stamp.is_some_and(|s| s.mtime_ns.max(s.ctime_ns) >= now - RACY_NS) {
                return None;
            }
            stamped.push((path, stamp));
        }
        let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(name, _)| {
                let name = name.as_encoded_bytes();
                // `PATH` chooses the system file (`user_system_file`).
                name.starts_with(b"GIT_")
                    || name == b"HOME"
                    || name == b"XDG_CONFIG_HOME"
                    || name == b"PATH"
            })
            .collect();
        env.sort();
        Some(Stamp {
            files: stamped,
            env,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `git ARGS…` in `dir`, which must succeed.
    fn git<S: AsRef<std::ffi::OsStr>>(dir: &Path, args: &[S]) {
        let status = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .status()
            .expect("run git");
        assert!(status.success(), "git failed");
    }

    fn repo_in(dir: &Path) -> Enclosing {
        git(dir, &["init", "-q"]);
        crate::ignore::enclosing_repository(dir).expect("the repository is found")
    }

    fn set_excludes(dir: &Path, value: &str) {
        git(dir, &["config", "core.excludesFile", value]);
    }

    /// `GIT_CONFIG_PARAMETERS` as git itself writes it for the programs it runs (read back through an
    /// alias that prints it): quotes, spaces, an implicit true and an escaped `!`, and the older form.
    #[test]
    fn git_config_parameters_are_read_as_git_writes_them() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let output = std::process::Command::new("git")
            .args([
                "-c",
                "core.excludesFile=/tmp/a b's",
                "-c",
                "core.ignoreCase",
                "-c",
                "alias.shown=!printenv GIT_CONFIG_PARAMETERS",
                "shown",
            ])
            .env_remove("GIT_CONFIG_PARAMETERS")
            .current_dir(dir.path())
            .output()
            .expect("run git");
        assert!(output.status.success(), "{output:?}");
        let written = String::from_utf8_lossy(&output.stdout);
        let parsed = parse_config_parameters(written.trim_end().as_bytes()).expect("well-formed");
        let parsed: Vec<String> = parsed.iter().map(ToString::to_string).collect();
        assert_eq!(
            parsed,
            [
                "core.excludesFile=/tmp/a b's",
                "core.ignoreCase",
                "alias.shown=!printenv GIT_CONFIG_PARAMETERS",
            ],
            "{written}"
        );
        assert_eq!(
            parse_config_parameters(b"'core.excludesfile=/x' 'core.ignorecase'")
                .expect("the older form")
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["core.excludesfile=/x", "core.ignorecase"]
        );
        for malformed in [&b"core.x=1"[..], b"'core.x'=1", b"'core.x", b"'a''b'"] {
            assert_eq!(parse_config_parameters(malformed), None, "{malformed:?}");
        }
    }

    /// `core.excludesFile` set to the empty string is how git is told to read no global excludes file:
    /// the value is the empty path (which opens nothing), not "unset" (which means the XDG default). Real
    /// git, given an XDG default that ignores `*.xdg`, agrees in both cases.
    #[test]
    fn an_empty_value_means_no_excludes_file_not_the_default() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let repo = repo_in(dir.path());
        let home = tempfile::tempdir().expect("a temporary HOME");
        let xdg = home.path().join(".config");
        std::fs::create_dir_all(xdg.join("git")).expect("mkdir");
        std::fs::write(xdg.join("git").join("ignore"), "*.xdg\n").expect("write the default");
        let git_ignores = || {
            std::process::Command::new("git")
                .args(["check-ignore", "-q", "a.xdg"])
                .current_dir(dir.path())
                .env("HOME", home.path())
                .env("XDG_CONFIG_HOME", &xdg)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .status()
                .expect("run git check-ignore")
                .success()
        };
        assert!(git_ignores(), "unset: git reads the XDG default");
        // (The machine's own global configuration may set a value; it is never the empty path here.)
        assert_ne!(
            configured_excludes_file(Some(&repo), None),
            Some(PathBuf::new())
        );

        set_excludes(dir.path(), "");
        assert!(!git_ignores(), "set empty: git reads no excludes file");
        let value = configured_excludes_file(Some(&repo), None);
        assert_eq!(value, Some(PathBuf::new()));
        let rules = crate::ignore::read_rules_following(value.as_deref().unwrap_or(Path::new("/")))
            .expect("reading the empty path is not an error");
        assert_eq!(rules, None, "and it holds no rules");
    }

    /// A repository whose `core.worktree` is a subdirectory is opened where its `.git` is, so its
    /// `core.excludesFile` is read for a worktree there (review: opening the subdirectory failed, and the
    /// XDG default was read instead).
    #[test]
    fn a_core_worktree_repository_s_excludes_file_is_read() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let wt = dir.path().join("wt");
        std::fs::create_dir_all(&wt).expect("mkdir");
        git(dir.path(), &["init", "-q"]);
        set_excludes(dir.path(), "/tmp/core-worktree-excludes");
        git(dir.path(), &["config", "core.worktree", "../wt"]);
        let wt = std::fs::canonicalize(&wt).expect("canonical");
        let repo = crate::ignore::enclosing_repository(&wt).expect("the repository is found");
        assert_eq!(repo.root, wt, "git's top level");
        assert_eq!(
            configured_excludes_file(Some(&repo), None),
            Some(PathBuf::from("/tmp/core-worktree-excludes"))
        );
    }

    /// A repository gix cannot open (SHA-256 objects) still has its own configuration read: its
    /// `core.excludesFile` and `core.ignoreCase` apply, as git applies them (review: neither did).
    #[test]
    fn a_repository_gix_cannot_open_still_has_its_configuration_read() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        git(dir.path(), &["init", "-q", "--object-format=sha256"]);
        assert!(
            gix::open(dir.path()).is_err(),
            "the case: gix cannot open it"
        );
        set_excludes(dir.path(), "/tmp/sha256-excludes");
        git(dir.path(), &["config", "core.ignoreCase", "true"]);
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        let repo = crate::ignore::enclosing_repository(&root).expect("the repository is found");
        assert_eq!(
            configured_excludes_file(Some(&repo), None),
            Some(PathBuf::from("/tmp/sha256-excludes"))
        );
        assert!(configured_ignore_case(Some(&repo), None));
    }

    /// Waits until a file just written is past the racy second, so its value may be kept.
    fn settle() {
        std::thread::sleep(std::time::Duration::from_millis(1100));
    }

    /// The kept value follows every change of the repository's configuration: a value set, changed in
    /// place with the same length, and removed, each read back as git reads it.
    #[test]
    fn a_kept_value_follows_the_configuration() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let repo = repo_in(dir.path());
        set_excludes(dir.path(), "/tmp/first-excludes");
        settle();
        let read = || configured_excludes_file(Some(&repo), None);
        assert_eq!(read(), Some(PathBuf::from("/tmp/first-excludes")));
        assert_eq!(read(), Some(PathBuf::from("/tmp/first-excludes")), "kept");
        set_excludes(dir.path(), "/tmp/other-excludes");
        assert_eq!(
            read(),
            Some(PathBuf::from("/tmp/other-excludes")),
            "changed, same length"
        );
        settle();
        assert_eq!(read(), Some(PathBuf::from("/tmp/other-excludes")));
        git(dir.path(), &["config", "--unset", "core.excludesFile"]);
        let unset = read();
        assert_ne!(unset, Some(PathBuf::from("/tmp/other-excludes")), "removed");
    }

    /// A value that comes from an included file follows that file too.
    #[test]
    fn an_included_file_is_part_of_the_stamp() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let repo = repo_in(dir.path());
        let included = dir.path().join("extra.gitconfig");
        std::fs::write(&included, "[core]\n\texcludesFile = /tmp/included-one\n").expect("write");
        git(
            dir.path(),
            &[
                std::ffi::OsStr::new("config"),
                std::ffi::OsStr::new("include.path"),
                included.as_os_str(),
            ],
        );
        settle();
        let read = || configured_excludes_file(Some(&repo), None);
        assert_eq!(read(), Some(PathBuf::from("/tmp/included-one")));
        std::fs::write(&included, "[core]\n\texcludesFile = /tmp/included-two\n").expect("write");
        assert_eq!(read(), Some(PathBuf::from("/tmp/included-two")));
    }

    /// So does one that gave nothing when the value was kept: an include (relative, and conditional)
    /// naming a file that did not exist yet, or was empty, made or filled later (review: the value kept
    /// came from no section of it, so the file was not in the stamp).
    #[test]
    fn an_include_that_gave_nothing_is_part_of_the_stamp() {
        for (key, relative, empty) in [
            ("include.path", true, false),
            ("includeIf.gitdir:/.path", false, true),
        ] {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let repo = repo_in(dir.path());
            let included = dir.path().join(".git").join("later.gitconfig");
            let named = if relative {
                PathBuf::from("later.gitconfig")
            } else {
                included.clone()
            };
            if empty {
                std::fs::write(&included, "").expect("an empty include");
            }
            git(
                dir.path(),
                &[
                    std::ffi::OsStr::new("config"),
                    std::ffi::OsStr::new(key),
                    named.as_os_str(),
                ],
            );
            set_excludes(dir.path(), "/tmp/before-the-include");
            settle();
            let read = || configured_excludes_file(Some(&repo), None);
            assert_eq!(
                read(),
                Some(PathBuf::from("/tmp/before-the-include")),
                "{key}"
            );
            assert_eq!(
                read(),
                Some(PathBuf::from("/tmp/before-the-include")),
                "{key}: kept"
            );
            std::fs::write(
                &included,
                "[core]\n\texcludesFile = /tmp/from-the-include\n",
            )
            .expect("write the include");
            let git_says = std::process::Command::new("git")
                .args(["config", "core.excludesFile"])
                .current_dir(dir.path())
                .output()
                .expect("run git config");
            assert_eq!(
                String::from_utf8_lossy(&git_says.stdout).trim(),
                "/tmp/from-the-include",
                "{key}: git reads the include now"
            );
            assert_eq!(
                read(),
                Some(PathBuf::from("/tmp/from-the-include")),
                "{key}"
            );
        }
    }
}
