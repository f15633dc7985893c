//! End-to-end scenarios: the whole application on port 0 with a temporary git repository (driven by
//! real `git`) and a temporary SQLite database, spoken to over HTTP.

mod bad_input;
mod documented;
mod events;
mod postgres;
mod scenario;
mod security;
mod support;
