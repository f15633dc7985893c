//! `snapshot_bench`: times rewind's snapshot store against the `git` commands OpenCode runs for the same
//! operations, on generated worktrees (10,000 and 100,000 files by default). Run it through
//! `cargo xtask bench snapshot`; CI and the tests never run it.
//!
//! `snapshot_bench [--sizes 10000,100000] [--reps 5]` drives the benchmark and prints the table.
//! `snapshot_bench child <track|revert|restore> --wt DIR --data DIR ...` (internal) runs one rewind operation
//! in its own process and prints one `BENCH` line with the operation's wall time (measured inside the
//! process, so process start is excluded) and the process's peak memory (`VmHWM`). Git commands are timed as
//! whole processes, which is what OpenCode pays. Each row also times its floor, the bare system calls the
//! operation cannot do without (`floor.rs`).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use rewind_core::SnapshotPort;
use rewind_core::model::{RelPath, SnapshotId, SnapshotPatch};
use rewind_git::{ExcludesFile, GitSnapshotStore, GitStoreConfig};

mod floor;

const USAGE: &str = "usage: snapshot_bench [--sizes 10000,100000] [--reps N]
  (internal) snapshot_bench child track --wt DIR --data DIR [--repeat N]
  (internal) snapshot_bench child revert --wt DIR --data DIR --snapshot ID [--base ID] --files LIST
  (internal) snapshot_bench child restore --wt DIR --data DIR --to ID
  (profiling) snapshot_bench generate --wt DIR --files N   (the benchmark's worktree, kept)
  (profiling) snapshot_bench floor --wt DIR [--writes N]   (the bare system calls, on 1, nproc and 16 threads)";

/// The generator's seed: every run generates the same worktrees.
const SEED: u64 = 0x5eed_2e71_d0c5;
/// Regular files per directory.
const FILES_PER_DIR: usize = 20;
/// Directory names; each directory has at most this many subdirectories.
const DIR_NAMES: [&str; 8] = ["src", "lib", "core", "util", "api", "ui", "test", "docs"];
const STEMS: [&str; 12] = [
    "main", "index", "model", "view", "handler", "service", "config", "types", "helpers", "store",
    "router", "schema",
];
const EXTENSIONS: [&str; 8] = ["rs", "ts", "js", "json", "md", "py", "go", "txt"];
/// File sizes are log-normal: the median, and sigma of the underlying normal (mean about 3.2 KB).
const MEDIAN_SIZE: f64 = 2500.0;
const SIZE_SIGMA: f64 = 0.7;
const MAX_SIZE: usize = 1 << 20;
/// One symlink (to a sibling file) per this many regular files.
const FILES_PER_SYMLINK: usize = 1000;
/// Ignored files under `build/`: one per this many regular files.
const FILES_PER_IGNORED: usize = 100;

const FEW_CHANGES: usize = 10;
const REVERT_FILES: usize = 1000;
const CHECKOUT_BATCH: usize = 100;
/// Longer than the stat cache's racy margin (1 s).
const RACY_PAUSE: Duration = Duration::from_millis(1100);
/// From this size on, the first-track cases run at most 3 repetitions.
const LARGE: usize = 50_000;
const MEMORY_GOAL_MB: f64 = 200.0;
const MEMORY_GOAL_FILES: usize = 100_000;
const GOAL_RETRACK: f64 = 0.3;
const GOAL_FIRST_TRACK: f64 = 0.5;
const GOAL_REVERT_RESTORE: f64 = 0.1;
/// The check that rewind's snapshot id equals git's `write-tree`.
const SAME_ID: &str = "id = git tree";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.split_first() {
        Some((first, rest)) if first == "child" => child(rest),
        Some((first, rest)) if first == "generate" => generate_only(rest),
        Some((first, rest)) if first == "floor" => floor(rest),
        _ => drive(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("snapshot_bench: {error:#}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// The child: one rewind operation.

fn child(args: &[String]) -> Result<()> {
    let (op, rest) = args.split_first().context(USAGE)?;
    let options = options(rest)?;
    let get = |name: &str| {
        options
            .get(name)
            .map(String::as_str)
            .with_context(|| format!("child {op}: --{name} is missing\n{USAGE}"))
    };
    let wt = PathBuf::from(get("wt")?);
    let mut config = GitStoreConfig::new(get("data")?, "rewind-bench");
    config.excludes_file = ExcludesFile::None;
    let store = GitSnapshotStore::new(config);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let (elapsed, fields) = match op.as_str() {
        "track" => {
            // `--repeat N` (for profiling) tracks N times and reports the last.
            let repeat: usize = options.get("repeat").map_or(Ok(1), |n| n.parse())?;
            let mut outcome = None;
            let mut elapsed = Duration::ZERO;
            for _ in 0..repeat.max(1) {
                let start = Instant::now();
                outcome = Some(runtime.block_on(store.track(&wt))?);
                elapsed = start.elapsed();
            }
            let outcome = outcome.context("no track ran")?;
            let fields = format!(
                "id={} hashed={} skipped={}",
                outcome.id,
                outcome.hashed,
                outcome.skipped.len()
            );
            (elapsed, fields)
        }
        "revert" => {
            let snapshot = SnapshotId::parse(get("snapshot")?)?;
            // As the service reverts: the worktree tracked first, in the same process (SPEC 6 step 4), and
            // that snapshot is the base; only the revert is timed. `--base ID` (profiling) skips the track,
            // so the revert reads the stat cache from its file, as no caller of the port does.
            let base = match options.get("base") {
                Some(base) => SnapshotId::parse(base)?,
                None => runtime.block_on(store.track(&wt))?.id,
            };
            let list = fs::read_to_string(get("files")?).context("reading the file list")?;
            let files = list
                .lines()
                .map(RelPath::new)
                .collect::<rewind_core::Result<Vec<_>>>()?;
            let patches = [SnapshotPatch {
                hash: snapshot,
                files,
            }];
            let start = Instant::now();
            let outcome = runtime.block_on(store.revert(&wt, &patches, &base))?;
            let elapsed = start.elapsed();
            let fields = format!(
                "base={base} applied={} written={} deleted={} kept={}",
                outcome.applied,
                outcome.written.len(),
                outcome.deleted.len(),
                outcome.kept.len()
            );
            (elapsed, fields)
        }
        "restore" => {
            let to = SnapshotId::parse(get("to")?)?;
            let start = Instant::now();
            let outcome = runtime.block_on(store.restore(&wt, &to, None))?;
            let elapsed = start.elapsed();
            let fields = format!(
                "written={} deleted={} kept={}",
                outcome.written.len(),
                outcome.deleted.len(),
                outcome.kept.len()
            );
            (elapsed, fields)
        }
        other => bail!("unknown child operation {other:?}\n{USAGE}"),
    };
    let hwm = vm_hwm_kb().map_or_else(|| "-".to_owned(), |kb| kb.to_string());
    println!("BENCH ns={} hwm_kb={hwm} {fields}", elapsed.as_nanos());
    Ok(())
}

/// Writes back everything dirty (untimed) before a timed operation, so neither tool pays for the
/// write-back of what the other (or the setup) just wrote: git's side writes 100,000 loose objects before
/// rewind's revert row, and the kernel writes them out meanwhile.
fn settle() {
    rustix::fs::sync();
}

/// This process's peak resident set size in kB, from `/proc/self/status`.
fn vm_hwm_kb() -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
    line.trim().strip_suffix("kB")?.trim().parse().ok()
}

/// `--name value` pairs.
fn options(args: &[String]) -> Result<HashMap<String, String>> {
    let mut options = HashMap::new();
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let name = flag
            .strip_prefix("--")
            .with_context(|| format!("unexpected argument {flag:?}\n{USAGE}"))?;
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value\n{USAGE}"))?;
        options.insert(name.to_owned(), value.clone());
    }
    Ok(options)
}

/// What the bare system calls under the benchmark's operations cost on this machine (`floor.rs`), each on 1,
/// `nproc` and 16 threads: listing and lstat of `--wt` (a first track's walk), with every file read too,
/// lstat of its files alone (a re-track's), `--writes` files (default 1,000) each written to a new file
/// beside it and renamed over it (a revert's safe writes, SPEC 2.5; the content written is the file's own),
/// and, when `--wt` has a `.git` with loose objects, hard links of them and reads of them whole (what owning
/// a committed repository's loose objects costs at the least, SPEC 2.1). The benchmark's table measures the
/// same in its `floor ms` column.
fn floor(args: &[String]) -> Result<()> {
    let options = options(args)?;
    let wt = PathBuf::from(options.get("wt").context(USAGE)?);
    let writes: usize = options.get("writes").map_or(Ok(1_000), |n| n.parse())?;
    let ms = |took: Duration| took.as_secs_f64() * 1000.0;
    let mut files = Vec::new();
    let how = |read| floor::Walk {
        read,
        gather: true,
        ignored: &[],
    };
    for threads in floor::thread_counts() {
        let (took, listed) = floor::walk(&wt, threads, &how(false))?;
        println!(
            "floor: listing and lstat of {} files on {threads} thread(s): {:.1} ms",
            thousands(listed.len()),
            ms(took)
        );
        files = listed;
    }
    files.sort();
    for threads in floor::thread_counts() {
        let (took, _) = floor::walk(&wt, threads, &how(true))?;
        println!(
            "floor: the same with every file read, on {threads} thread(s): {:.1} ms",
            ms(took)
        );
    }
    let by_dir = floor::ByDir::of(&files);
    for threads in floor::thread_counts() {
        let took = floor::lstat(&by_dir, threads)?;
        println!(
            "floor: lstat of the files alone on {threads} thread(s): {:.1} ms",
            ms(took)
        );
    }
    let step = (files.len() / writes.max(1)).max(1);
    let chosen: Vec<PathBuf> = files.iter().step_by(step).take(writes).cloned().collect();
    let chosen_by_dir = floor::ByDir::of(&chosen);
    for threads in floor::thread_counts() {
        let took = floor::safe_writes(&chosen_by_dir, threads)?;
        println!(
            "floor: {} files written to a new file and renamed over, on {threads} thread(s): {:.1} ms",
            thousands(chosen.len()),
            ms(took)
        );
    }
    let objects = wt.join(".git").join("objects");
    let loose = floor::loose_objects(&objects);
    if loose.is_empty() {
        return Ok(());
    }
    for threads in floor::thread_counts() {
        let (linked, read) = floor::own_loose(&objects, &loose, threads)?;
        println!(
            "floor: {} loose objects on {threads} thread(s): hard links (and 256 fan-out directories) {:.1} ms, \
             each read whole {:.1} ms",
            thousands(loose.len()),
            ms(linked),
            ms(read)
        );
    }
    Ok(())
}

fn generate_only(args: &[String]) -> Result<()> {
    let options = options(args)?;
    let wt = PathBuf::from(options.get("wt").context(USAGE)?);
    let n: usize = options
        .get("files")
        .context(USAGE)?
        .parse()
        .context("--files: expected a number")?;
    fs::create_dir_all(&wt).with_context(|| format!("creating {}", wt.display()))?;
    let (files, bytes) = generate(&wt, n)?;
    eprintln!(
        "generated {} files, {:.1} MB, in {}",
        thousands(files.len()),
        bytes as f64 / 1e6,
        wt.display()
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------------------
// The driver.

fn drive(args: &[String]) -> Result<()> {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return Ok(());
    }
    let options = options(args)?;
    let mut sizes = vec![10_000, 100_000];
    let mut reps = 5;
    for (name, value) in &options {
        match name.as_str() {
            "sizes" => {
                sizes = value
                    .split(',')
                    .map(|s| s.trim().replace('_', "").parse::<usize>())
                    .collect::<Result<_, _>>()
                    .with_context(|| {
                        format!("--sizes {value:?}: expected numbers like 10000,100000")
                    })?;
            }
            "reps" => {
                reps = value
                    .parse()
                    .with_context(|| format!("--reps {value:?}: expected a number"))?;
            }
            other => bail!("unknown option --{other}\n{USAGE}"),
        }
    }
    ensure!(
        sizes.iter().all(|&n| n >= 100),
        "every size must be at least 100 files"
    );
    ensure!(reps >= 1, "--reps must be at least 1");

    let exe = std::env::current_exe().context("locating this benchmark's binary")?;
    let temp = tempfile::Builder::new()
        .prefix("rewind-bench-")
        .tempdir()
        .context("creating the temporary directory")?;
    print_preamble(temp.path(), reps)?;
    let mut rows = Vec::new();
    for &n in &sizes {
        let bench = Bench::new(&exe, temp.path(), n, reps)?;
        bench.run(&mut rows)?;
        bench.remove()?;
    }
    print_summary(&rows);
    eprintln!("removing {}", temp.path().display());
    temp.close().context("removing the temporary directory")?;
    Ok(())
}

fn print_preamble(temp: &Path, reps: usize) -> Result<()> {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let git = run(git_command(temp).arg("--version"))?;
    let git = String::from_utf8_lossy(&git).trim().to_owned();
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or_else(|_| std::env::consts::OS.to_owned(), |r| r.trim().to_owned());
    println!("rewind snapshot benchmark (release build)");
    println!("machine: nproc {nproc}, {git}, cpu {cpu}, kernel {kernel}");
    println!("temp:    {}", temp.display());
    println!(
        "trees:   seed {SEED:#x}; {FILES_PER_DIR} files per directory, up to {} subdirectories each; sizes \
         log-normal (median {MEDIAN_SIZE} B, sigma {SIZE_SIGMA}, max {MAX_SIZE} B); 1 symlink per \
         {FILES_PER_SYMLINK} files, 1 ignored file per {FILES_PER_IGNORED} under build/",
        DIR_NAMES.len()
    );
    println!(
        "method:  median of {reps} repetitions (at most 3 for first track from {} files); rewind timed inside \
         a child process (peak = largest VmHWM of its children); git timed as whole processes, -c \
         core.autocrlf=false -c core.symlinks=true -c core.longpaths=true, GIT_CONFIG_NOSYSTEM=1, \
         GIT_CONFIG_GLOBAL=/dev/null; git's `init --bare` and seeding are not timed; before the restore row, \
         a 1.1 s pause (untimed) so the files the revert row's git side wrote are not racy for rewind; before \
         every timed operation of either tool, a sync (untimed)",
        thousands(LARGE)
    );
    println!(
        "goals:   ratio rewind/git: re-track <= {GOAL_RETRACK}, first track <= {GOAL_FIRST_TRACK}, revert and \
         restore <= {GOAL_REVERT_RESTORE}; rewind peak memory < {MEMORY_GOAL_MB} MB at {} files",
        thousands(MEMORY_GOAL_FILES)
    );
    println!(
        "floors:  the bare system calls each operation cannot do without (SPEC 2.1, 2.4, 2.5), timed alone in \
         the same run after both tools (median; the fastest of 1, nproc and 16 threads; relative to open \
         directories): first track uncommitted: listing every directory that is not ignored, an lstat of \
         every entry that is not a directory, and reading every file; committed: the longer of that listing \
         and owning a loose object per file (SPEC 2.1: hard links, or reading each whole, the faster), or \
         the listing with every file read (nothing seeded), the shorter; packed: the listing; re-track: an \
         lstat of every file; revert: the {REVERT_FILES} files written to a new file with their permissions \
         and renamed over (SPEC 2.5); restore: the longer of an lstat of every file and the {FEW_CHANGES} \
         safe writes. fl/git is floor / git; MISS:floor marks a goal below it"
    );
    println!();
    println!(
        "{:>9}  {:<30} {:>4} {:>11} {:>11} {:>7} {:>6} {:<11} {:>9} {:>7} {:>8}  notes",
        "files",
        "operation",
        "reps",
        "rewind ms",
        "git ms",
        "ratio",
        "goal",
        "met",
        "floor ms",
        "fl/git",
        "peak MB"
    );
    std::io::stdout().flush().context("writing the table")?;
    Ok(())
}

/// One (size, operation) line of the table.
struct Row {
    files: usize,
    operation: String,
    goal: f64,
    rewind: Vec<Duration>,
    git: Vec<Duration>,
    /// The bare system calls the operation cannot do without, timed alone in the same run (`floor.rs`).
    floor: Vec<Duration>,
    peak_kb: Option<u64>,
    notes: Vec<String>,
    /// Named checks: (name, failed, total).
    checks: Vec<(String, usize, usize)>,
}

impl Row {
    fn new(files: usize, operation: impl Into<String>, goal: f64) -> Self {
        Row {
            files,
            operation: operation.into(),
            goal,
            rewind: Vec::new(),
            git: Vec::new(),
            floor: Vec::new(),
            peak_kb: None,
            notes: Vec::new(),
            checks: Vec::new(),
        }
    }

    fn add_rewind(&mut self, report: &ChildReport) {
        self.rewind.push(report.elapsed);
        if let Some(kb) = report.hwm_kb {
            self.peak_kb = Some(self.peak_kb.map_or(kb, |peak| peak.max(kb)));
        }
    }

    fn note(&mut self, note: impl Into<String>) {
        let note = note.into();
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    /// Counts one outcome of a check; the notes say how many failed.
    fn check(&mut self, name: &str, ok: bool) {
        match self.checks.iter_mut().find(|(n, _, _)| n == name) {
            Some((_, failed, total)) => {
                *failed += usize::from(!ok);
                *total += 1;
            }
            None => self.checks.push((name.to_owned(), usize::from(!ok), 1)),
        }
    }

    fn ratio(&self) -> f64 {
        median(&self.rewind).as_secs_f64() / median(&self.git).as_secs_f64().max(1e-9)
    }

    fn met(&self) -> bool {
        self.ratio() <= self.goal
    }

    /// The floor's ratio to git's median, when the floor was timed.
    fn floor_ratio(&self) -> Option<f64> {
        (!self.floor.is_empty())
            .then(|| median(&self.floor).as_secs_f64() / median(&self.git).as_secs_f64().max(1e-9))
    }

    /// Whether the goal asks for less time than the floor takes on this machine: no implementation of SPEC
    /// can meet it here.
    fn below_floor(&self) -> bool {
        self.floor_ratio().is_some_and(|floor| floor > self.goal)
    }

    /// Whether every check passed (a row whose results are wrong does not count as meeting its goal).
    fn right(&self) -> bool {
        self.checks.iter().all(|(_, failed, _)| *failed == 0)
    }

    fn peak_mb(&self) -> Option<f64> {
        self.peak_kb.map(|kb| kb as f64 * 1024.0 / 1e6)
    }

    fn print(&self) {
        let goal = format!("<={}", self.goal);
        let peak = self
            .peak_mb()
            .map_or_else(|| "-".to_owned(), |mb| format!("{mb:.1}"));
        let (floor, floor_ratio) = match self.floor_ratio() {
            Some(ratio) => (
                format!("{:.1}", median(&self.floor).as_secs_f64() * 1e3),
                format!("{ratio:.3}"),
            ),
            None => ("-".to_owned(), "-".to_owned()),
        };
        println!(
            "{:>9}  {:<30} {:>4} {:>11.1} {:>11.1} {:>7.3} {:>6} {:<11} {:>9} {:>7} {:>8}  {}",
            thousands(self.files),
            self.operation,
            self.rewind.len().min(self.git.len()),
            median(&self.rewind).as_secs_f64() * 1e3,
            median(&self.git).as_secs_f64() * 1e3,
            self.ratio(),
            goal,
            match (self.right(), self.met(), self.below_floor()) {
                (false, _, _) => "WRONG",
                (true, true, _) => "ok",
                (true, false, true) => "MISS:floor",
                (true, false, false) => "MISS",
            },
            floor,
            floor_ratio,
            peak,
            self.notes
                .iter()
                .cloned()
                .chain(self.checks.iter().map(|(name, failed, total)| {
                    if *failed == 0 {
                        format!("{name}: ok")
                    } else {
                        format!("{name}: FAILED {failed} of {total}")
                    }
                }))
                .collect::<Vec<_>>()
                .join(", ")
        );
        // The table is read while the benchmark runs; a failed flush only delays it.
        let _ = std::io::stdout().flush();
    }
}

fn print_summary(rows: &[Row]) {
    let met = rows.iter().filter(|r| r.right() && r.met()).count();
    let wrong = rows.iter().filter(|r| !r.right()).count();
    println!();
    println!(
        "ratio goals met: {met} of {}; rows with a failed check (WRONG): {wrong}",
        rows.len()
    );
    let missed: Vec<&Row> = rows.iter().filter(|r| r.right() && !r.met()).collect();
    let below: Vec<String> = missed
        .iter()
        .filter(|r| r.below_floor())
        .map(|r| format!("{} {}", thousands(r.files), r.operation))
        .collect();
    println!(
        "missed rows whose goal is below this machine's floor (MISS:floor; the bare system calls SPEC \
         requires take longer than the goal allows): {} of {}{}",
        below.len(),
        missed.len(),
        if below.is_empty() {
            String::new()
        } else {
            format!(" ({})", below.join("; "))
        }
    );
    let peak = rows
        .iter()
        .filter(|r| r.files >= MEMORY_GOAL_FILES)
        .filter_map(Row::peak_mb)
        .fold(None, |acc: Option<f64>, mb| {
            Some(acc.map_or(mb, |a| a.max(mb)))
        });
    match peak {
        Some(mb) => println!(
            "peak memory at >= {} files: {mb:.1} MB (goal < {MEMORY_GOAL_MB} MB): {}",
            thousands(MEMORY_GOAL_FILES),
            if mb < MEMORY_GOAL_MB { "ok" } else { "MISS" }
        ),
        None => println!(
            "peak memory goal not measured (no size of at least {} files)",
            thousands(MEMORY_GOAL_FILES)
        ),
    }
}

fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    match sorted.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2,
    }
}

fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// What a child reported.
struct ChildReport {
    elapsed: Duration,
    hwm_kb: Option<u64>,
    fields: HashMap<String, String>,
}

impl ChildReport {
    fn field(&self, name: &str) -> Result<&str> {
        self.fields
            .get(name)
            .map(String::as_str)
            .with_context(|| format!("the child's report has no {name}"))
    }

    fn id(&self) -> Result<String> {
        self.field("id").map(str::to_owned)
    }
}

/// What the first track may seed from: nothing (no repository), the user's loose objects (right after
/// `git commit`), or their packs (after `git gc`, as in a clone).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Seeding {
    None,
    Loose,
    Packed,
}

/// The state revert and restore go back to.
struct Snapshot {
    /// rewind's snapshot id.
    id: String,
    /// git's tree of the same state.
    tree: String,
    /// Every regular file's size, by index.
    sizes: Vec<u64>,
}

/// A regular, tracked file of the generated worktree.
struct TreeFile {
    rel: String,
}

/// One worktree size: its directories, files and stores.
struct Bench<'a> {
    exe: &'a Path,
    root: PathBuf,
    wt: PathBuf,
    /// rewind's data directory (the store lives inside).
    data: PathBuf,
    /// git's separate git dir (OpenCode's snapshot repository).
    sep: PathBuf,
    files: Vec<TreeFile>,
    n: usize,
    reps: usize,
    /// Makes every edit's content unique.
    edits: std::cell::Cell<u64>,
}

impl<'a> Bench<'a> {
    fn new(exe: &'a Path, temp: &Path, n: usize, reps: usize) -> Result<Self> {
        let root = temp.join(n.to_string());
        let wt = root.join("wt");
        fs::create_dir_all(&wt).with_context(|| format!("creating {}", wt.display()))?;
        eprintln!("[{}] generating the worktree", thousands(n));
        let start = Instant::now();
        let (files, bytes) = generate(&wt, n)?;
        eprintln!(
            "[{}] generated {} files, {:.1} MB, in {:.1} s",
            thousands(n),
            thousands(files.len()),
            bytes as f64 / 1e6,
            start.elapsed().as_secs_f64()
        );
        Ok(Bench {
            exe,
            data: root.join("rewind-data"),
            sep: root.join("git-sep"),
            root,
            wt,
            files,
            n,
            reps,
            edits: std::cell::Cell::new(0),
        })
    }

    fn remove(&self) -> Result<()> {
        eprintln!("[{}] removing {}", thousands(self.n), self.root.display());
        fs::remove_dir_all(&self.root).with_context(|| format!("removing {}", self.root.display()))
    }

    fn progress(&self, what: &str) {
        eprintln!("[{}] {what}", thousands(self.n));
    }

    fn run(&self, rows: &mut Vec<Row>) -> Result<()> {
        let first_reps = if self.n >= LARGE {
            self.reps.min(3)
        } else {
            self.reps
        };
        let mut finish = |row: Row| {
            row.print();
            rows.push(row);
        };
        finish(self.first_track(first_reps, Seeding::None)?);
        self.progress("committing the worktree");
        self.commit_worktree()?;
        finish(self.first_track(first_reps, Seeding::Loose)?);
        self.progress("packing the repository (git gc)");
        run(git_command(&self.wt).args(["-c", "gc.autoDetach=false", "gc", "-q"]))?;
        finish(self.first_track(first_reps, Seeding::Packed)?);
        finish(self.retrack(0)?);
        finish(self.retrack(FEW_CHANGES)?);
        let snapshot = self.snapshot_both()?;
        finish(self.revert(&snapshot)?);
        finish(self.restore(&snapshot)?);
        Ok(())
    }

    // --- the operations ---

    fn first_track(&self, reps: usize, seeding: Seeding) -> Result<Row> {
        let committed = seeding != Seeding::None;
        let label = match seeding {
            Seeding::None => "first track, uncommitted",
            Seeding::Loose => "first track, committed",
            Seeding::Packed => "first track, committed, packed",
        };
        self.progress(label);
        let mut row = Row::new(self.n, label, GOAL_FIRST_TRACK);
        for _ in 0..reps {
            remove_if_exists(&self.data)?;
            let report = self.rewind("track", &[])?;
            row.add_rewind(&report);
            row.note(format!("hashed={}", report.field("hashed")?));
            let rewind_id = report.id()?;

            remove_if_exists(&self.sep)?;
            run(git_command(&self.root)
                .args(["init", "--bare", "-q"])
                .arg(&self.sep))?;
            if committed {
                let info = self.sep.join("objects").join("info");
                fs::create_dir_all(&info)?;
                let mut alternates = self.wt.join(".git").join("objects").into_os_string();
                alternates.push("\n");
                fs::write(info.join("alternates"), alternates.as_encoded_bytes())?;
                fs::copy(self.wt.join(".git").join("index"), self.sep.join("index"))
                    .context("copying the worktree's index")?;
            }
            settle();
            let start = Instant::now();
            self.sep_git(&["add", "--all"])?;
            let tree = self.sep_git(&["write-tree"])?;
            row.git.push(start.elapsed());
            row.check(SAME_ID, rewind_id == String::from_utf8_lossy(&tree).trim());
            let (floor, parts) = self.first_track_floor(seeding)?;
            row.floor.push(floor);
            if let Some(parts) = parts {
                // The last repetition's.
                row.notes.retain(|note| !note.starts_with("floor parts"));
                row.note(parts);
            }
        }
        Ok(row)
    }

    /// The floor of a first track (see the preamble's `floors:`), and for a committed one with loose
    /// objects its parts (listed, owned, listed and read) in ms.
    fn first_track_floor(&self, seeding: Seeding) -> Result<(Duration, Option<String>)> {
        let ignored = [self.wt.join("build")];
        let walk = |read| -> Result<Duration> {
            settle();
            floor::fastest(|threads| {
                let how = floor::Walk {
                    read,
                    gather: false,
                    ignored: &ignored,
                };
                Ok(floor::walk(&self.wt, threads, &how)?.0)
            })
        };
        let walked = walk(seeding == Seeding::None)?;
        if seeding != Seeding::Loose {
            return Ok((walked, None));
        }
        let objects = self.wt.join(".git").join("objects");
        let mut loose = floor::loose_objects(&objects);
        // The snapshot needs a blob per file at most (not the commit's trees, nor the commit).
        loose.truncate(self.files.len());
        settle();
        let owned = floor::fastest(|threads| {
            let (linked, read) = floor::own_loose(&objects, &loose, threads)?;
            Ok(linked.min(read))
        })?;
        // Or nothing seeded: every file read, as in a first track without a repository.
        let read = walk(true)?;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let parts = format!(
            "floor parts: listed {:.1}, owned {:.1}, listed and read {:.1}",
            ms(walked),
            ms(owned),
            ms(read)
        );
        Ok((walked.max(owned).min(read), Some(parts)))
    }

    /// The tracked regular files of the worktree at `indices`, by directory.
    fn abs_files(&self, indices: impl IntoIterator<Item = usize>) -> floor::ByDir {
        let files: Vec<PathBuf> = indices
            .into_iter()
            .map(|i| self.wt.join(&self.files[i].rel))
            .collect();
        floor::ByDir::of(&files)
    }

    fn retrack(&self, changes: usize) -> Result<Row> {
        let label = if changes == 0 {
            "re-track, no change".to_owned()
        } else {
            format!("re-track, {changes} changed")
        };
        self.progress(&label);
        let mut row = Row::new(self.n, label, GOAL_RETRACK);
        for rep in 0..self.reps {
            if changes > 0 {
                self.modify(&pick(self.files.len(), changes, 7 * rep + 1))?;
            }
            let report = self.rewind("track", &[])?;
            row.add_rewind(&report);
            row.note(format!("hashed={}", report.field("hashed")?));
            let (elapsed, tree) = self.git_retrack()?;
            row.git.push(elapsed);
            row.check(SAME_ID, report.id()? == tree);
            let all = self.abs_files(0..self.files.len());
            settle();
            row.floor
                .push(floor::fastest(|threads| floor::lstat(&all, threads))?);
        }
        Ok(row)
    }

    /// OpenCode's track of an existing snapshot repository: the changed and untracked files, then add and
    /// write-tree. Returns the time and the tree.
    fn git_retrack(&self) -> Result<(Duration, String)> {
        settle();
        let start = Instant::now();
        self.sep_git(&["diff-files", "--name-only", "-z"])?;
        self.sep_git(&["ls-files", "--others", "--exclude-standard", "-z"])?;
        self.sep_git(&["add", "--all"])?;
        let tree = self.sep_git(&["write-tree"])?;
        let elapsed = start.elapsed();
        Ok((elapsed, String::from_utf8_lossy(&tree).trim().to_owned()))
    }

    /// Tracks the worktree as it is now in both stores (not timed); the ids and every file's size.
    fn snapshot_both(&self) -> Result<Snapshot> {
        let id = self.rewind("track", &[])?.id()?;
        let (_, tree) = self.git_retrack()?;
        let all: Vec<usize> = (0..self.files.len()).collect();
        Ok(Snapshot {
            id,
            tree,
            sizes: self.sizes(&all)?,
        })
    }

    fn revert(&self, snapshot: &Snapshot) -> Result<Row> {
        let count = REVERT_FILES.min(self.files.len() / 2);
        let label = format!("revert {} files", thousands(count));
        self.progress(&label);
        let mut row = Row::new(self.n, label, GOAL_REVERT_RESTORE);
        let targets = pick(self.files.len(), count, 3);
        let list = self.root.join("revert-files.txt");
        let mut text = String::new();
        for &i in &targets {
            text.push_str(&self.files[i].rel);
            text.push('\n');
        }
        fs::write(&list, text)?;
        // rewind first, then git, so neither tool's writes stale the other's stat cache mid-measurement.
        for _ in 0..self.reps {
            self.modify(&targets)?;
            let report = self.rewind(
                "revert",
                &[
                    ("snapshot", OsStr::new(&snapshot.id)),
                    ("files", list.as_os_str()),
                ],
            )?;
            row.add_rewind(&report);
            row.note(format!("written={}", report.field("written")?));
            row.check("rewind restored", self.restored(&targets, snapshot)?);
        }
        for _ in 0..self.reps {
            self.modify(&targets)?;
            settle();
            let start = Instant::now();
            for batch in targets.chunks(CHECKOUT_BATCH) {
                let mut args = vec!["checkout", snapshot.tree.as_str(), "--"];
                args.extend(batch.iter().map(|&i| self.files[i].rel.as_str()));
                self.sep_git(&args)?;
            }
            row.git.push(start.elapsed());
            row.check("git restored", self.restored(&targets, snapshot)?);
            // The same files, written again with the content they have now.
            let written = self.abs_files(targets.iter().copied());
            settle();
            row.floor.push(floor::fastest(|threads| {
                floor::safe_writes(&written, threads)
            })?);
        }
        Ok(row)
    }

    fn restore(&self, snapshot: &Snapshot) -> Result<Row> {
        let label = format!("restore after {FEW_CHANGES} changes");
        self.progress(&label);
        let mut row = Row::new(self.n, label, GOAL_REVERT_RESTORE);
        // The service tracks before it restores; this also refreshes rewind's stat cache after git's writes.
        // First a pause past the racy margin (1 s, as git's): the previous row's git side has just rewritten
        // 1,000 files, and a track within a second of that would cache them as racy, so every restore of this
        // row would hash them again. This row measures a restore after 10 changes, not that.
        std::thread::sleep(RACY_PAUSE);
        let now = self.rewind("track", &[])?.id()?;
        row.check("unchanged since revert", now == snapshot.id);
        // rewind first: git's checkout-index rewrites every file, which would stale rewind's stat cache.
        for rep in 0..self.reps {
            let targets = pick(self.files.len(), FEW_CHANGES, 5 * rep + 2);
            self.modify(&targets)?;
            let report = self.rewind("restore", &[("to", OsStr::new(&snapshot.id))])?;
            row.add_rewind(&report);
            row.note(format!("written={}", report.field("written")?));
            row.check("rewind restored", self.restored(&targets, snapshot)?);
        }
        for rep in 0..self.reps {
            let targets = pick(self.files.len(), FEW_CHANGES, 5 * rep + 2);
            self.modify(&targets)?;
            settle();
            let start = Instant::now();
            self.sep_git(&["read-tree", &snapshot.tree])?;
            self.sep_git(&["checkout-index", "-a", "-f"])?;
            row.git.push(start.elapsed());
            row.check("git restored", self.restored(&targets, snapshot)?);
            let all = self.abs_files(0..self.files.len());
            let written = self.abs_files(targets.iter().copied());
            settle();
            let looked = floor::fastest(|threads| floor::lstat(&all, threads))?;
            settle();
            let wrote = floor::fastest(|threads| floor::safe_writes(&written, threads))?;
            // The two may overlap (a file written while others are looked at): the longer is the floor.
            row.floor.push(looked.max(wrote));
        }
        Ok(row)
    }

    // --- helpers ---

    /// Runs one rewind operation in a child process.
    fn rewind(&self, op: &str, extra: &[(&str, &OsStr)]) -> Result<ChildReport> {
        settle();
        let mut command = Command::new(self.exe);
        command
            .arg("child")
            .arg(op)
            .arg("--wt")
            .arg(&self.wt)
            .arg("--data")
            .arg(&self.data);
        for (name, value) in extra {
            command.arg(format!("--{name}")).arg(value);
        }
        command.stdin(Stdio::null()).stderr(Stdio::inherit());
        let output = command
            .output()
            .with_context(|| format!("running the rewind child `{op}`"))?;
        if !output.status.success() {
            bail!("the rewind child `{op}` failed ({})", output.status);
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix("BENCH "))
            .with_context(|| format!("the rewind child `{op}` printed no BENCH line: {stdout}"))?;
        let fields: HashMap<String, String> = line
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let ns: u64 = fields
            .get("ns")
            .and_then(|ns| ns.parse().ok())
            .with_context(|| format!("the rewind child `{op}` reported no time: {line}"))?;
        let hwm_kb = fields.get("hwm_kb").and_then(|kb| kb.parse().ok());
        Ok(ChildReport {
            elapsed: Duration::from_nanos(ns),
            hwm_kb,
            fields,
        })
    }

    /// `git --git-dir=SEP --work-tree=WT <args>` in the worktree; its stdout.
    fn sep_git(&self, args: &[&str]) -> Result<Vec<u8>> {
        let mut git_dir = OsString::from("--git-dir=");
        git_dir.push(&self.sep);
        let mut work_tree = OsString::from("--work-tree=");
        work_tree.push(&self.wt);
        run(git_command(&self.wt).arg(git_dir).arg(work_tree).args(args))
    }

    /// Makes the worktree a git repository with everything committed (not timed).
    fn commit_worktree(&self) -> Result<()> {
        run(git_command(&self.wt).args(["init", "-q"]))?;
        run(git_command(&self.wt).args(["add", "--all"]))?;
        // No automatic gc: from about 6,700 loose objects `git commit` starts `git gc --auto` in the
        // background, which would pack the repository at some point during the next rows. The committed
        // row seeds from loose objects; the packed row runs `git gc` itself first.
        run(git_command(&self.wt).args([
            "-c",
            "gc.auto=0",
            "-c",
            "user.name=rewind bench",
            "-c",
            "user.email=bench@rewind.invalid",
            "-c",
            "commit.gpgsign=false",
            "commit",
            "-q",
            "--no-verify",
            "-m",
            "generated",
        ]))?;
        Ok(())
    }

    /// Appends a unique line to each file.
    fn modify(&self, indices: &[usize]) -> Result<()> {
        for &i in indices {
            let edit = self.edits.get() + 1;
            self.edits.set(edit);
            let path = self.wt.join(&self.files[i].rel);
            let mut file = fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .with_context(|| format!("opening {}", path.display()))?;
            writeln!(file, "// bench edit {edit}")
                .with_context(|| format!("editing {}", path.display()))?;
        }
        Ok(())
    }

    fn sizes(&self, indices: &[usize]) -> Result<Vec<u64>> {
        indices
            .iter()
            .map(|&i| {
                let path = self.wt.join(&self.files[i].rel);
                Ok(fs::symlink_metadata(&path)
                    .with_context(|| format!("reading {}", path.display()))?
                    .len())
            })
            .collect()
    }

    /// Whether every one of these files has its size at the snapshot again (every edit changes the size).
    fn restored(&self, indices: &[usize], snapshot: &Snapshot) -> Result<bool> {
        let now = self.sizes(indices)?;
        Ok(now
            .iter()
            .zip(indices)
            .all(|(size, &i)| *size == snapshot.sizes[i]))
    }
}

/// `count` distinct indices below `n`, spread evenly, shifted by `salt`.
fn pick(n: usize, count: usize, salt: usize) -> Vec<usize> {
    let count = count.clamp(1, n.max(1));
    let stride = n / count;
    (0..count).map(|i| i * stride + salt % stride).collect()
}

fn remove_if_exists(dir: &Path) -> Result<()> {
    match fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing {}", dir.display())),
    }
}

/// `git` with the options OpenCode passes and no system or global configuration.
fn git_command(cwd: &Path) -> Command {
    let mut command = Command::new("git");
    command
        .args([
            "-c",
            "core.autocrlf=false",
            "-c",
            "core.symlinks=true",
            "-c",
            "core.longpaths=true",
        ])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("GIT_OBJECT_DIRECTORY")
        .env_remove("GIT_ALTERNATE_OBJECT_DIRECTORIES")
        .current_dir(cwd)
        .stdin(Stdio::null());
    command
}

/// Runs a command to completion; its stdout, or an error with its stderr.
fn run(command: &mut Command) -> Result<Vec<u8>> {
    let output = command
        .output()
        .with_context(|| format!("running {command:?}"))?;
    if !output.status.success() {
        bail!(
            "{command:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(output.stdout)
}

// ---------------------------------------------------------------------------------------------------------
// The generator.

/// SplitMix64: small, fast and deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Uniform in (0, 1).
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let (u1, u2) = (self.unit(), self.unit());
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    fn size(&mut self) -> usize {
        let size = (MEDIAN_SIZE.ln() + SIZE_SIGMA * self.normal()).exp();
        (size as usize).clamp(1, MAX_SIZE)
    }
}

/// Source-like text that file contents are cut from.
fn corpus(rng: &mut Rng) -> Vec<u8> {
    const WORDS: [&str; 32] = [
        "let", "fn", "return", "if", "else", "for", "in", "match", "struct", "impl", "self",
        "value", "result", "error", "config", "path", "file", "items", "count", "name", "=", "+",
        "{", "}", "(", ")", "0", "1", "true", "false", "None", "Some",
    ];
    let mut text = Vec::with_capacity(2 * MAX_SIZE + 128);
    while text.len() < 2 * MAX_SIZE {
        let indent = 4 * rng.below(4);
        text.extend(std::iter::repeat_n(b' ', indent));
        let width = 20 + rng.below(70);
        let start = text.len();
        while text.len() - start < width {
            text.extend_from_slice(WORDS[rng.below(WORDS.len())].as_bytes());
            text.push(b' ');
        }
        text.push(b'\n');
    }
    text
}

/// Writes `n` regular files (plus symlinks, a `.gitignore` and ignored files) under `wt`; returns the
/// regular files and their total size.
fn generate(wt: &Path, n: usize) -> Result<(Vec<TreeFile>, u64)> {
    let mut rng = Rng(SEED ^ n as u64);
    let corpus = corpus(&mut rng);
    let dirs = n.div_ceil(FILES_PER_DIR);
    // Directories form a tree: directory k > 0 is child (k - 1) % 8 of directory (k - 1) / 8.
    let mut dir_paths: Vec<String> = Vec::with_capacity(dirs);
    for k in 0..dirs {
        let path = if k == 0 {
            String::new()
        } else {
            let parent = &dir_paths[(k - 1) / DIR_NAMES.len()];
            let name = DIR_NAMES[(k - 1) % DIR_NAMES.len()];
            if parent.is_empty() {
                name.to_owned()
            } else {
                format!("{parent}/{name}")
            }
        };
        fs::create_dir_all(wt.join(&path))?;
        dir_paths.push(path);
    }
    let mut files = Vec::with_capacity(n);
    let mut bytes = 0u64;
    let mut content = Vec::with_capacity(MAX_SIZE + 256);
    for i in 0..n {
        let dir = &dir_paths[i / FILES_PER_DIR];
        let stem = STEMS[rng.below(STEMS.len())];
        let ext = EXTENSIONS[rng.below(EXTENSIONS.len())];
        let name = format!("{stem}_{:02}.{ext}", i % FILES_PER_DIR);
        let rel = if dir.is_empty() {
            name.clone()
        } else {
            format!("{dir}/{name}")
        };
        let size = rng.size();
        content.clear();
        // A unique first line, so no two files share a blob.
        content.extend_from_slice(format!("// {rel}\n").as_bytes());
        let offset = rng.below(corpus.len() - size);
        content.extend_from_slice(&corpus[offset..offset + size]);
        let path = wt.join(&rel);
        fs::write(&path, &content).with_context(|| format!("writing {}", path.display()))?;
        bytes += content.len() as u64;
        if rng.below(50) == 0 {
            make_executable(&path)?;
        }
        if i.is_multiple_of(FILES_PER_SYMLINK) {
            let link = wt
                .join(dir)
                .join(format!("link_{:02}.{ext}", i % FILES_PER_DIR));
            make_symlink(Path::new(&name), &link)?;
        }
        files.push(TreeFile { rel });
    }
    fs::write(wt.join(".gitignore"), "/build/\n*.tmp\n")?;
    let build = wt.join("build");
    fs::create_dir_all(&build)?;
    for i in 0..n / FILES_PER_IGNORED {
        let size = rng.size();
        let offset = rng.below(corpus.len() - size);
        fs::write(
            build.join(format!("out_{i}.o")),
            &corpus[offset..offset + size],
        )?;
    }
    Ok((files, bytes))
}

#[cfg(unix)]
fn make_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))
        .with_context(|| format!("chmod {}", path.display()))
}

#[cfg(not(unix))]
fn make_executable(_path: &Path) -> Result<()> {
    Ok(())
}

#[cfg(unix)]
fn make_symlink(target: &Path, link: &Path) -> Result<()> {
    std::os::unix::fs::symlink(target, link).with_context(|| format!("symlink {}", link.display()))
}

#[cfg(not(unix))]
fn make_symlink(_target: &Path, _link: &Path) -> Result<()> {
    Ok(())
}
