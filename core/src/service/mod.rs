//! The use cases over the ports.
pub struct ServiceConfig;
pub struct Rewind;
