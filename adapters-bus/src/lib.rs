//! rewind-bus: live event delivery (EventBus) on a tokio broadcast channel.
//!
//! Not built yet: this crate holds no adapter until its issue lands, and exports nothing, so nothing can
//! mistake it for a working one.
