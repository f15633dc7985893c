//! OpenCode-compatible ids (SPEC section 3): `prefix_` + 12 hex digits of clock + 14 random base62 characters.
//!
//! Message and part ids ascend (string order is creation order); session ids descend (the clock bits are
//! inverted, so newer sessions sort first). Generated ids never sort below the last id they must follow.

use std::fmt;
use std::sync::Mutex;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The low 48 bits that the 12 hex digits of an id hold.
const CLOCK_MASK: u64 = (1 << 48) - 1;
const HEX_LEN: usize = 12;
const RANDOM_LEN: usize = 14;
const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// What every id type shares: its prefix and the order of its clock bits.
pub trait Id: Sized + Clone + Ord {
    /// The prefix before the underscore (`ses`, `msg`, `prt`, `evt`).
    const PREFIX: &'static str;
    /// True when newer ids sort first (session ids).
    const DESCENDING: bool;
    /// Builds the id from text already validated.
    fn from_validated(text: String) -> Self;
    /// The id's text.
    fn as_str(&self) -> &str;

    /// Parses and validates an id of this type.
    fn parse(text: &str) -> Result<Self> {
        validate(text, Self::PREFIX)?;
        Ok(Self::from_validated(text.to_owned()))
    }

    /// The 48-bit clock value of the id (`ms * 4096 + counter`, low 48 bits), undoing the inversion of
    /// descending ids.
    fn clock(&self) -> u64 {
        let hex = &self.as_str()[Self::PREFIX.len() + 1..Self::PREFIX.len() + 1 + HEX_LEN];
        // Validated on construction, so the hex digits parse.
        let raw = u64::from_str_radix(hex, 16).unwrap_or(0);
        if Self::DESCENDING {
            !raw & CLOCK_MASK
        } else {
            raw
        }
    }
}

/// How many characters of a malformed id its error shows: an id is 30, and an error that echoed a long
/// input whole was as long (review: a 1 MB id, a 1 MB answer).
const SHOWN_CHARS: usize = 64;

fn validate(text: &str, prefix: &str) -> Result<()> {
    // Built only for an error: every id read from the database passes here.
    let bad = |why: &str| {
        let shown: String = text.chars().take(SHOWN_CHARS).collect();
        let shown = match text.chars().count().saturating_sub(SHOWN_CHARS) {
            0 => format!("{shown:?}"),
            more => format!("{shown:?}… ({more} more characters)"),
        };
        Err(Error::InvalidInput(format!("malformed id {shown}: {why}")))
    };
    let Some(rest) = text.strip_prefix(prefix).and_then(|r| r.strip_prefix('_')) else {
        return bad(&format!("it must start with \"{prefix}_\""));
    };
    if rest.len() != HEX_LEN + RANDOM_LEN {
        return bad(&format!(
            "expected {} characters after the prefix, found {}",
            HEX_LEN + RANDOM_LEN,
            rest.len()
        ));
    }
    let (hex, random) = rest.split_at(HEX_LEN);
    if !hex
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return bad("the 12 clock digits must be lower-case hex");
    }
    if !random.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return bad("the last 14 characters must be base62");
    }
    Ok(())
}

fn format_id(prefix: &str, bits: u64) -> String {
    let mut rng = rand::rng();
    let random: String = (0..RANDOM_LEN)
        .map(|_| BASE62[rng.random_range(0..BASE62.len())] as char)
        .collect();
    compose_id(prefix, bits, &random)
}

/// `prefix_` + the 12 hex digits of `bits` + `tail` (14 base62 characters).
fn compose_id(prefix: &str, bits: u64, tail: &str) -> String {
    format!("{prefix}_{:012x}{tail}", bits & CLOCK_MASK)
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $descending:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl Id for $name {
            const PREFIX: &'static str = $prefix;
            const DESCENDING: bool = $descending;
            fn from_validated(text: String) -> Self {
                $name(text)
            }
            fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl $name {
            /// Parses and validates an id of this type.
            pub fn parse(text: &str) -> Result<Self> {
                <Self as Id>::parse(text)
            }
            /// The id's text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = Error;
            fn try_from(text: String) -> Result<Self> {
                validate(&text, $prefix)?;
                Ok($name(text))
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_type!(
    /// A session id (`ses_…`, descending: newer sessions sort first).
    SessionId, "ses", true
);
id_type!(
    /// A message id (`msg_…`, ascending).
    MessageId, "msg", false
);
id_type!(
    /// A part id (`prt_…`, ascending).
    PartId, "prt", false
);
id_type!(
    /// An event id (`evt_…`, ascending).
    EventId, "evt", false
);

/// Makes ids whose clock part is `max(now, last + 1)`, so ids of one process, and ids that must follow
/// an existing one, keep creation order even when the wall clock steps back or a client's id ran ahead.
///
/// `last` is this process's own clock: an id that must follow a client's id that ran ahead is placed after
/// that id, but the run-ahead does not move `last`, so it stays within its own session or message and the
/// ids of every other session keep the wall clock (and their order). At the top of the 48-bit clock, where
/// `last + 1` does not exist, an id that must follow another takes the same clock and the next 14-character
/// tail after the other's, so it still sorts after it.
#[derive(Debug, Default)]
pub struct IdGenerator {
    last: Mutex<u64>,
}

impl IdGenerator {
    /// A generator with no history.
    pub fn new() -> Self {
        Self::default()
    }

    fn own_clock(&self, now_ms: u64) -> u64 {
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let clock = (now_ms.wrapping_mul(4096) & CLOCK_MASK)
            .max(last.saturating_add(1))
            .min(CLOCK_MASK);
        *last = clock;
        clock
    }

    /// A new ascending id that sorts after `after` (the last id of its session or message) when given.
    pub fn ascending<T: Id>(&self, now_ms: u64, after: Option<&T>) -> T {
        debug_assert!(!T::DESCENDING);
        let own = self.own_clock(now_ms);
        let Some(after) = after else {
            return T::from_validated(format_id(T::PREFIX, own));
        };
        let clock = own.max(after.clock().saturating_add(1)).min(CLOCK_MASK);
        if clock > after.clock() {
            return T::from_validated(format_id(T::PREFIX, clock));
        }
        // `after` is at the top of the clock: follow its tail. Client ids there are refused
        // (`ensure_sorts_after`), so `after` is one of ours, with a random tail and room after it.
        let tail = &after.as_str()[T::PREFIX.len() + 1 + HEX_LEN..];
        match next_tail(tail) {
            Some(tail) => T::from_validated(compose_id(T::PREFIX, clock, &tail)),
            None => T::from_validated(format_id(T::PREFIX, clock)),
        }
    }

    /// A new descending id (sessions): the clock bits inverted, so newer ids sort first.
    pub fn descending<T: Id>(&self, now_ms: u64) -> T {
        debug_assert!(T::DESCENDING);
        let clock = self.own_clock(now_ms);
        T::from_validated(format_id(T::PREFIX, !clock & CLOCK_MASK))
    }
}

/// The base62 string right after `tail` in string order (same length), or `None` when it is all `z`.
fn next_tail(tail: &str) -> Option<String> {
    let mut digits: Vec<u8> = tail.bytes().collect();
    for digit in digits.iter_mut().rev() {
        let index = BASE62.iter().position(|b| b == digit)?;
        match BASE62.get(index + 1) {
            Some(next) => {
                *digit = *next;
                return String::from_utf8(digits).ok();
            }
            None => *digit = BASE62[0],
        }
    }
    None
}

/// Checks that a client-supplied ascending id sorts after the last existing id of its session or message,
/// and that it leaves room after it: an id at the top of the 48-bit clock (`ffffffffffff`) is refused, as
/// no id rewind makes could then be sure to follow it.
pub fn ensure_sorts_after<T: Id + fmt::Display>(id: &T, last: Option<&T>) -> Result<()> {
    if id.clock() == CLOCK_MASK {
        return Err(Error::InvalidInput(format!(
            "id {id} is at the end of the id clock (ffffffffffff); no later id could follow it, so it is \
             refused: use an id made from the current time"
        )));
    }
    match last {
        Some(last) if id.as_str() <= last.as_str() => Err(Error::InvalidInput(format!(
            "id {id} does not sort after the last existing id {last}; ids must ascend in creation order"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOP: &str = "ffffffffffff";

    /// A malformed id's error shows its first 64 characters and how many more there were.
    #[test]
    fn a_long_malformed_id_is_shown_cut() {
        let long = format!("msg_{}", "a".repeat(100_000));
        let message = MessageId::parse(&long)
            .map_err(|e| e.to_string())
            .expect_err("malformed");
        assert!(message.len() < 300, "{message}");
        assert!(message.contains("(99940 more characters)"), "{message}");
        let short = MessageId::parse("msg_bad")
            .map_err(|e| e.to_string())
            .expect_err("malformed");
        assert!(short.contains("\"msg_bad\""), "{short}");
    }

    #[test]
    fn a_client_id_that_ran_ahead_moves_only_the_ids_that_follow_it() {
        let ids = IdGenerator::new();
        let now = 1_000;
        let ahead = MessageId::parse("msg_fffffffff000AAAAAAAAAAAAAA").expect("id");
        let follower: MessageId = ids.ascending(now, Some(&ahead));
        assert!(follower > ahead);
        let elsewhere: MessageId = ids.ascending(now, None);
        assert_eq!(
            elsewhere.clock(),
            now * 4096 + 1,
            "another session keeps the clock"
        );
        let session: SessionId = ids.descending(now);
        assert_eq!(session.clock(), now * 4096 + 2);
    }

    #[test]
    fn at_the_top_of_the_clock_a_following_id_still_sorts_after() {
        let ids = IdGenerator::new();
        let mut last = PartId::parse(&format!("prt_{TOP}zzzzzzzzzzzzzy")).expect("id");
        let next: PartId = ids.ascending(5, Some(&last));
        assert_eq!(next.as_str(), format!("prt_{TOP}zzzzzzzzzzzzzz"));
        last = PartId::parse(&format!("prt_{TOP}0000000000000z")).expect("id");
        for _ in 0..100 {
            let next: PartId = ids.ascending(5, Some(&last));
            assert!(next > last, "{next} > {last}");
            assert_eq!(next.clock(), CLOCK_MASK);
            last = next;
        }
        // 61 (`z`) + 100 = 161 = 2 * 62 + 37 (`b`).
        assert_eq!(last.as_str(), format!("prt_{TOP}0000000000002b"));
    }

    #[test]
    fn a_client_id_at_the_top_of_the_clock_is_refused() {
        let top = MessageId::parse(&format!("msg_{TOP}AAAAAAAAAAAAAA")).expect("id");
        assert!(matches!(
            ensure_sorts_after(&top, None),
            Err(Error::InvalidInput(_))
        ));
        let below = MessageId::parse("msg_fffffffffffeAAAAAAAAAAAAAA").expect("id");
        assert!(ensure_sorts_after(&below, None).is_ok());
    }

    #[test]
    fn next_tail_carries_in_base62_order() {
        assert_eq!(next_tail("0z").as_deref(), Some("10"));
        assert_eq!(next_tail("09").as_deref(), Some("0A"));
        assert_eq!(next_tail("0Z").as_deref(), Some("0a"));
        assert_eq!(next_tail("zz"), None);
    }
}
