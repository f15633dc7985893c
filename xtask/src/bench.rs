//! `cargo xtask bench snapshot`: builds `adapters-git/examples/snapshot_bench/` in release mode and runs
//! it, passing its output through; `cargo xtask bench http` does the same with
//! `tests/examples/http_bench.rs`. It times rewind's snapshot store against the `git` commands OpenCode uses
//! for the same operations; CI and the tests never run it.

use std::process::Command;

use anyhow::{Context, Result, bail};

pub const USAGE: &str = "usage: cargo xtask bench snapshot [--sizes 10000,100000] [--reps N]
       cargo xtask bench http [--reps N] [--stream]
  --sizes  worktree sizes in files, comma-separated, each at least 100 (default 10000,100000)
  --reps   repetitions per operation, medians reported (default 5; first track runs at most 3 from
           50,000 files)
  http: revert (to turns 1, 5, 9) and unrevert through rewind's HTTP API over a 5,000-file repository
         and a 10-turn session; --reps per target (default 20); median and p95 in ms; then a part append
         and a step finish early and late in a long session (300 parts, 40 turns of 600 KB); --stream
         keeps an event stream open and read throughout, as a client such as OpenCode's does
  Generated worktrees live under the temporary directory ($TMPDIR) and are removed at the end.";

pub fn run(args: &[String]) -> Result<()> {
    match args.split_first() {
        Some((what, rest)) if what == "snapshot" => snapshot(rest),
        Some((what, rest)) if what == "http" => http(rest),
        Some((help, _)) if help == "-h" || help == "--help" => {
            println!("{USAGE}");
            Ok(())
        }
        _ => bail!("{USAGE}"),
    }
}

fn snapshot(args: &[String]) -> Result<()> {
    let mut pass: Vec<String> = Vec::new();
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            "--sizes" => {
                let value = args.next().context(USAGE)?;
                let valid = value.split(',').all(|n| {
                    n.trim()
                        .replace('_', "")
                        .parse::<usize>()
                        .is_ok_and(|n| n >= 100)
                });
                if !valid {
                    bail!("--sizes {value:?}: expected numbers of at least 100, like 10000,100000");
                }
                pass.extend([flag.clone(), value.clone()]);
            }
            "--reps" => {
                let value = args.next().context(USAGE)?;
                if !value.parse::<usize>().is_ok_and(|n| n >= 1) {
                    bail!("--reps {value:?}: expected a number of at least 1");
                }
                pass.extend([flag.clone(), value.clone()]);
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut command = Command::new(cargo);
    command
        .args([
            "run",
            "--release",
            "-p",
            "rewind-git",
            "--example",
            "snapshot_bench",
            "--",
        ])
        .args(&pass);
    eprintln!(
        "xtask: cargo run --release -p rewind-git --example snapshot_bench -- {}",
        pass.join(" ")
    );
    let status = command.status().context("could not run cargo")?;
    if !status.success() {
        bail!("the snapshot benchmark failed ({status})");
    }
    Ok(())
}

fn http(args: &[String]) -> Result<()> {
    let mut pass: Vec<String> = Vec::new();
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            "--reps" => {
                let value = args.next().context(USAGE)?;
                if !value.parse::<usize>().is_ok_and(|n| n >= 1) {
                    bail!("--reps {value:?}: expected a number of at least 1");
                }
                pass.extend([flag.clone(), value.clone()]);
            }
            "--stream" => pass.push(flag.clone()),
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    eprintln!(
        "xtask: cargo run --release -p rewind-tests --example http_bench -- {}",
        pass.join(" ")
    );
    let status = Command::new(cargo)
        .args([
            "run",
            "--release",
            "-p",
            "rewind-tests",
            "--example",
            "http_bench",
            "--",
        ])
        .args(&pass)
        .status()
        .context("could not run cargo")?;
    if !status.success() {
        bail!("the HTTP benchmark failed ({status})");
    }
    Ok(())
}
