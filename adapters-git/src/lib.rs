//! rewind-git: the snapshot store (SnapshotPort) on gitoxide.
//!
//! Not built yet: this crate holds no adapter until its issue lands, and exports nothing, so nothing can
//! mistake it for a working one.
