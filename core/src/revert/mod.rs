//! The pure decisions of a revert: the revert point (SPEC section 5), the hidden range, the patches it
//! undoes, the cleanup plan and the per-file plan of a set of patches. Nothing here does IO.

mod plan;
mod point;

pub use plan::{file_plan, snapshot_patches};
pub use point::{
    CleanupPlan, HistorySeen, RevertPoint, RevertTarget, cleanup_plan, hidden_patches, is_hidden,
    select_revert_point, steps_closed_without_a_patch, unrecorded_steps,
};
