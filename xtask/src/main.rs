//! rewind's project tasks: `cargo xtask ci` (what CI and a new user run), `cargo xtask tidy` (the
//! architecture invariants that `cargo metadata` and the source tree can prove) and `cargo xtask bench`
//! (benchmarks, never run by CI).

mod bench;
mod tidy;

use std::process::Command;

use anyhow::{Context, Result, bail};

const USAGE: &str = "usage: cargo xtask <ci|tidy|bench>
  ci     cargo fmt --check, clippy -D warnings, tidy, then every test of the workspace
  tidy   check the dependency rules and module docs of ARCHITECTURE.md
  bench snapshot [--sizes 10000,100000] [--reps N]
         time rewind's snapshot store against the git commands OpenCode uses (release build; not run by CI)
  bench http [--reps N]
         latency of revert and unrevert through the HTTP API (release build; not run by CI)";

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("xtask: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("tidy") => tidy::run(),
        Some("bench") => bench::run(&args[1..]),
        Some("-h" | "--help") => {
            println!("{USAGE}");
            Ok(())
        }
        _ => bail!("{USAGE}"),
    }
}

fn ci() -> Result<()> {
    cargo(&["fmt", "--all", "--", "--check"])
        .context("formatting differs: run `cargo fmt --all`")?;
    cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--all-features",
        "--",
        "-D",
        "warnings",
    ])
    .context("clippy found problems")?;
    tidy::run()?;
    test_with_summary(&["test", "--workspace", "--all-features"])
}

/// Runs cargo test, echoing its output, and closes with one line that sums every test binary's result
/// (`tests: N passed, N failed, N skipped`), so the end of the log says how many tests ran in all rather
/// than the count of whichever binary happened to run last.
fn test_with_summary(args: &[&str]) -> Result<()> {
    use std::io::{BufRead, BufReader};
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    eprintln!("xtask: cargo {}", args.join(" "));
    let mut child = Command::new(cargo)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("could not run cargo")?;
    let stdout = child
        .stdout
        .take()
        .context("cargo test's output was not captured")?;
    let (mut passed, mut failed, mut ignored) = (0u64, 0u64, 0u64);
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading cargo test's output")?;
        println!("{line}");
        if let Some(rest) = line.strip_prefix("test result: ") {
            for field in rest.split(';') {
                let mut words = field.split_whitespace().rev();
                let (Some(kind), Some(count)) = (words.next(), words.next()) else {
                    continue;
                };
                let count: u64 = count.parse().unwrap_or(0);
                match kind {
                    "passed" => passed += count,
                    "failed" => failed += count,
                    "ignored" => ignored += count,
                    _ => {}
                }
            }
        }
    }
    let status = child.wait().context("waiting for cargo test")?;
    println!("tests: {passed} passed, {failed} failed, {ignored} skipped");
    if !status.success() {
        bail!("`cargo {}` failed ({status})", args.join(" "));
    }
    if passed == 0 {
        bail!("cargo test ran no test");
    }
    Ok(())
}

fn cargo(args: &[&str]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    eprintln!("xtask: cargo {}", args.join(" "));
    let status = Command::new(cargo)
        .args(args)
        .status()
        .context("could not run cargo")?;
    if !status.success() {
        bail!("`cargo {}` failed ({status})", args.join(" "));
    }
    Ok(())
}
