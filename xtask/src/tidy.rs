//! The tidy checks: `rewind-core` depends on no runtime, ORM, git or HTTP crate (nor anyhow), no adapter
//! depends on another adapter, and every Rust module starts with a `//!` line.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// Crates the core must not reach, directly or through its normal dependencies.
const FORBIDDEN_IN_CORE: &[&str] = &["tokio", "sea-orm", "gix", "axum", "anyhow", "sqlx", "hyper"];
const ADAPTERS: &[&str] = &["rewind-git", "rewind-sql", "rewind-bus"];

pub fn run() -> Result<()> {
    let metadata = metadata()?;
    let mut problems = Vec::new();
    check_dependencies(&metadata, &mut problems)?;
    let root = metadata["workspace_root"]
        .as_str()
        .context("cargo metadata has no workspace_root")?;
    check_module_docs(Path::new(root), &mut problems)?;
    if problems.is_empty() {
        eprintln!("xtask: tidy ok");
        Ok(())
    } else {
        bail!(
            "tidy found {} problem(s):\n  {}",
            problems.len(),
            problems.join("\n  ")
        )
    }
}

fn metadata() -> Result<Value> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--all-features"])
        .output()
        .context("could not run cargo metadata")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    serde_json::from_slice(&output.stdout)
        .context("cargo metadata printed something that is not JSON")
}

/// The names of a resolve node's dependencies, with whether each edge is a normal/build one (not dev-only).
fn edges(node: &Value) -> Vec<(String, bool)> {
    node["deps"]
        .as_array()
        .map(|deps| {
            deps.iter()
                .filter_map(|dep| {
                    let pkg = dep["pkg"].as_str()?.to_owned();
                    let normal = dep["dep_kinds"].as_array().is_some_and(|kinds| {
                        kinds.iter().any(|k| k["kind"].as_str() != Some("dev"))
                    });
                    Some((pkg, normal))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn check_dependencies(metadata: &Value, problems: &mut Vec<String>) -> Result<()> {
    let packages = metadata["packages"]
        .as_array()
        .context("no packages in metadata")?;
    let name_of: HashMap<&str, &str> = packages
        .iter()
        .filter_map(|p| Some((p["id"].as_str()?, p["name"].as_str()?)))
        .collect();
    let nodes = metadata["resolve"]["nodes"]
        .as_array()
        .context("no resolve graph in metadata")?;
    let node_of: HashMap<&str, &Value> = nodes
        .iter()
        .filter_map(|n| Some((n["id"].as_str()?, n)))
        .collect();
    let id_of = |name: &str| {
        name_of
            .iter()
            .find(|(_, n)| **n == name)
            .map(|(id, _)| (*id).to_owned())
    };

    // A crate's graph: everything reachable through normal and build edges, plus its direct
    // dev-dependencies (its own tests may use the testkit; a dependency's tests are not its concern).
    let graph_of = |start: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![start.to_owned()];
        while let Some(id) = stack.pop() {
            if !seen.insert(id.clone()) {
                continue;
            }
            let Some(node) = node_of.get(id.as_str()) else {
                continue;
            };
            for (dep, normal) in edges(node) {
                if normal || id == start {
                    stack.push(dep);
                }
            }
        }
        seen.remove(start);
        seen
    };

    let core = id_of("rewind-core").context("rewind-core is not in the workspace")?;
    for id in &graph_of(&core) {
        let name = name_of.get(id.as_str()).copied().unwrap_or_default();
        if FORBIDDEN_IN_CORE.contains(&name) {
            problems.push(format!(
                "rewind-core must not depend on {name} (found in its dependency graph)"
            ));
        }
    }

    // An adapter knows the core alone: no other adapter, directly or through anything else. (One on the
    // app, which depends on every adapter, would be a cycle Cargo refuses.)
    for adapter in ADAPTERS {
        let Some(id) = id_of(adapter) else { continue };
        for dep in graph_of(&id) {
            let name = name_of.get(dep.as_str()).copied().unwrap_or_default();
            if ADAPTERS.contains(&name) {
                problems.push(format!(
                    "adapter {adapter} must not depend on {name} (found in its dependency graph)"
                ));
            }
        }
    }
    Ok(())
}

fn check_module_docs(root: &Path, problems: &mut Vec<String>) -> Result<()> {
    let mut files = Vec::new();
    for top in [
        "core",
        "adapters-git",
        "adapters-sql",
        "adapters-bus",
        "app",
        "xtask",
        "tests",
    ] {
        for sub in ["src", "tests", "examples", "benches"] {
            collect_rust_files(&root.join(top).join(sub), &mut files)?;
        }
    }
    for file in files {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        let first = text
            .lines()
            .map(str::trim)
            .find(|line| !line.is_empty())
            .unwrap_or_default();
        if !first.starts_with("//!") {
            let shown = file
                .strip_prefix(root)
                .unwrap_or(&file)
                .display()
                .to_string();
            problems.push(format!(
                "{shown} does not start with a `//!` line saying what the module is for"
            ));
        }
    }
    Ok(())
}

fn collect_rust_files(dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    if !dir.is_dir() {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            collect_rust_files(&path, files)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    Ok(())
}
