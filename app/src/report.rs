//! Error text for people: an error and its causes on one line, each said once.
//!
//! Many errors put their cause's text into their own message *and* return the cause from `source()`
//! (sea-orm's `DbErr`, sqlx's errors, our `Error::Backend`), so printing the chain naively shows each
//! cause twice. [`chain`] prints a cause only when its text is not already part of what was printed.

use std::error::Error;

/// `error: cause: cause…`, leaving out each cause whose text the line already holds.
pub fn chain(error: &(dyn Error + 'static)) -> String {
    rewind_core::error::chain(error)
}

/// [`chain`] of an `anyhow::Error` (its contexts first, then the causes).
pub fn chain_anyhow(error: &anyhow::Error) -> String {
    chain(error.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer failed: {0}")]
    struct Repeats(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("inner broke")]
    struct Inner(#[source] std::io::Error);

    #[test]
    fn a_cause_already_in_the_message_is_said_once_and_a_new_one_is_added() {
        let error = Repeats(Inner(std::io::Error::other("disk on fire")));
        assert_eq!(chain(&error), "outer failed: inner broke: disk on fire");
    }

    #[test]
    fn an_anyhow_context_keeps_its_order_and_drops_repeats() {
        let error = anyhow::Error::new(Repeats(Inner(std::io::Error::other("x y"))))
            .context("cannot open the database db");
        assert_eq!(
            chain_anyhow(&error),
            "cannot open the database db: outer failed: inner broke: x y"
        );
    }
}
