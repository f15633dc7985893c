//! rewind-git's integration tests: the `SnapshotPort` contract suite on a real directory, real `git` as the
//! oracle of tree ids and line counts, OpenCode's snapshot scenarios, the safety rules of SPEC 2.5, and the
//! stat cache measured from outside the process.

mod applied;
mod bulk;
mod contract;
mod git_oracle;
mod harness;
mod opencode;
mod packs;
mod races;
mod safety;
mod seeding;
mod stat_cache_io;
mod track_races;
mod untracked_cache;
