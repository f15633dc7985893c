//! How commands talk to the terminal: JSON on stdout, coloured diffs when stdout is a terminal, and a
//! spinner on stderr for work that takes more than a moment when stderr is a terminal.

use std::borrow::Cow;
use std::ffi::OsString;
use std::future::Future;
use std::io::{IsTerminal, Write};
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use anyhow::{Context as _, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rewind_core::model::FileDiff;
use serde::Serialize;

/// How long work runs before the spinner appears.
const SPINNER_DELAY: Duration = Duration::from_millis(300);

/// Said after the cause when stdout cannot be written (a full disk, `> /dev/full`): output is written
/// after the work, so an `undo` whose report is lost was done all the same, and running it again would
/// undo another turn (CLI review L4).
pub const STDOUT_LOST: &str = "anything the command changed stays changed (`rewind log` shows the session), only its report is lost";

/// Prints a value as pretty JSON on stdout.
pub fn print_json(value: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(value).context("cannot encode the JSON output")?;
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        // The reader has gone (`rewind log --json | head -1`): ended quietly, as `println!` output is
        // (`quiet_on_closed_stdout`); the work was done and stored before the output.
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(141),
        written => written
            .map_err(|error| anyhow::anyhow!("cannot write to stdout: {error}; {STDOUT_LOST}")),
    }
}

/// Runs `work`, showing a spinner with `label` on stderr once it has taken longer than a moment; quiet
/// when stderr is not a terminal.
pub async fn with_progress<F: Future>(label: &str, work: F) -> F::Output {
    if !std::io::stderr().is_terminal() {
        return work.await;
    }
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        bar.set_style(style);
    }
    bar.set_message(label.to_owned());
    let shown = bar.clone();
    let reveal = tokio::spawn(async move {
        tokio::time::sleep(SPINNER_DELAY).await;
        shown.set_draw_target(ProgressDrawTarget::stderr());
        shown.enable_steady_tick(Duration::from_millis(100));
    });
    let result = work.await;
    reveal.abort();
    bar.finish_and_clear();
    result
}

/// Whether stdout is a terminal (colours on).
pub fn colour() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// Prints unified diffs, coloured on a terminal.
pub fn print_diffs(diffs: &[FileDiff], colour: bool) {
    for diff in diffs {
        if diff.patch.is_empty() {
            println!(
                "{} {} (binary or over the size cap: no line diff)",
                status_word(diff),
                shown(&diff.file)
            );
            continue;
        }
        if !diff.patch.contains("\n@@") {
            // Headers without a hunk: only the file's mode changed (or an empty file came or went).
            println!("{}", diff.patch.trim_end());
            let what = match diff.status {
                rewind_core::model::FileStatus::Modified => "only its mode changed",
                _ => "an empty file",
            };
            println!(
                "(no line changed, {what}: {} {})",
                status_word(diff).trim_end(),
                shown(&diff.file)
            );
            continue;
        }
        // Not `lines()`, which would drop the `\r` of a CRLF line: the output is a faithful patch.
        for line in diff.patch.split_terminator('\n') {
            if !colour {
                println!("{line}");
                continue;
            }
            let code = if line.starts_with("+++") || line.starts_with("---") {
                "1"
            } else if line.starts_with('+') {
                "32"
            } else if line.starts_with('-') {
                "31"
            } else if line.starts_with("@@") {
                "36"
            } else if line.starts_with("diff ") {
                "1"
            } else {
                ""
            };
            if code.is_empty() {
                println!("{line}");
            } else {
                println!("\x1b[{code}m{line}\x1b[0m");
            }
        }
    }
}

/// A path as the line-based output shows it: as it is, unless it holds a control character (a newline,
/// a tab), a double quote or a backslash; then in double quotes with C escapes, as git quotes names, so
/// one file is always one line and a quoted name cannot be mistaken for a plain one.
pub fn shown(path: &str) -> Cow<'_, str> {
    if path
        .chars()
        .any(|c| c.is_control() || c == '"' || c == '\\')
    {
        Cow::Owned(format!("\"{}\"", escaped(path, true)))
    } else {
        Cow::Borrowed(path)
    }
}

/// With `--json`, a failure's document on stdout: `{"error": {"message"}}`. A stdout that cannot be
/// written is left alone (the message is on stderr already).
pub fn print_error_json(message: &str) {
    use std::io::Write as _;
    let document = serde_json::json!({ "error": { "message": message } });
    let _ = writeln!(std::io::stdout().lock(), "{document}");
}

/// The command that restores `snapshot` at `paths` (worktree-relative; none: the whole worktree), as a
/// shell line: each path quoted when needed, and one that starts with `-` written as `./-…`, so that it is
/// not read as an option.
pub fn restore_command<'a>(snapshot: &str, paths: impl IntoIterator<Item = &'a str>) -> String {
    let mut line = format!("rewind snapshot restore {snapshot}");
    for path in paths {
        line.push(' ');
        if path.starts_with('-') {
            line.push_str(&shell_word(&format!("./{path}")));
        } else {
            line.push_str(&shell_word(path));
        }
    }
    line
}

/// `word` as one word of a POSIX shell command line: as it is when it holds only characters no shell
/// treats specially, else in single quotes (a `'` in it written as `'\''`).
pub fn shell_word(word: &str) -> Cow<'_, str> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "._/+-@%,:=".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        Cow::Borrowed(word)
    } else {
        Cow::Owned(format!("'{}'", word.replace('\'', "'\\''")))
    }
}

/// A message's text or a title on one line: each control character (a newline, a tab) written as its C
/// escape, the rest as it is.
pub fn one_line(text: &str) -> Cow<'_, str> {
    if text.chars().any(char::is_control) {
        Cow::Owned(escaped(text, false))
    } else {
        Cow::Borrowed(text)
    }
}

/// `text` with its control characters as C escapes, and with `"` and `\` escaped too when `quoted`.
fn escaped(text: &str, quoted: bool) -> String {
    let mut line = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '"' | '\\' if quoted => {
                line.push('\\');
                line.push(c);
            }
            '\n' => line.push_str("\\n"),
            '\t' => line.push_str("\\t"),
            '\r' => line.push_str("\\r"),
            c if c.is_control() => line.push_str(&format!("\\x{:02x}", u32::from(c))),
            c => line.push(c),
        }
    }
    line
}

/// One line per file: status, path, +/- counts (or what has none: `FileRow::counts_text`).
pub fn print_file_summary(diffs: &[FileDiff], indent: &str) {
    for diff in diffs {
        println!(
            "{indent}{} {} {}",
            status_word(diff),
            shown(&diff.file),
            super::history::FileRow::from(diff).counts_text()
        );
    }
}

/// `added`, `deleted` or `modified`.
pub fn status_word(diff: &FileDiff) -> &'static str {
    match diff.status {
        rewind_core::model::FileStatus::Added => "added   ",
        rewind_core::model::FileStatus::Deleted => "deleted ",
        rewind_core::model::FileStatus::Modified => "modified",
    }
}

/// A command line as a shell would read it back: words with spaces or quotes are single-quoted.
pub fn shell_line(words: &[OsString]) -> String {
    words
        .iter()
        .map(|word| match word.to_str() {
            Some(word) => {
                let plain = !word.is_empty()
                    && word
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
                if plain {
                    word.to_owned()
                } else {
                    format!("'{}'", word.replace('\'', "'\\''"))
                }
            }
            None => ansi_c_quoted(word.as_bytes()),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A word that is not UTF-8 as a `$'…'` string (bash, zsh, ksh and POSIX.1-2024 shells read it back as the
/// same bytes): each byte that is not UTF-8 as `\xHH`, quotes and backslashes escaped, the rest as it is.
fn ansi_c_quoted(bytes: &[u8]) -> String {
    let mut quoted = String::from("$'");
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\'' => quoted.push_str("\\'"),
                '\\' => quoted.push_str("\\\\"),
                '\n' => quoted.push_str("\\n"),
                c => quoted.push(c),
            }
        }
        for byte in chunk.invalid() {
            quoted.push_str(&format!("\\x{byte:02x}"));
        }
    }
    quoted.push('\'');
    quoted
}

/// Epoch milliseconds as `YYYY-MM-DD HH:MM:SS` UTC.
pub fn time_text(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (hour, minute, second) = (rest / 3600, rest % 3600 / 60, rest % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02} UTC")
}

/// The plural ending for `count` things.
pub fn plural(count: u64) -> &'static str {
    if count == 1 { "" } else { "s" }
}

/// Bytes in a readable unit.
pub fn bytes_text(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::{bytes_text, one_line, shell_line, shown, time_text};
    use std::ffi::{OsStr, OsString};

    #[test]
    fn times_are_utc_calendar_dates() {
        // Expected values from Python's datetime, an independent calendar.
        assert_eq!(time_text(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(time_text(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(time_text(1_795_994_891_755), "2026-11-29 23:28:11 UTC");
        assert_eq!(time_text(4_102_444_799_000), "2099-12-31 23:59:59 UTC");
    }

    #[test]
    fn command_lines_read_back_as_the_same_words_in_sh() {
        let words: Vec<OsString> = ["printf", "%s|", "a b", "it's", "", "plain-1.txt"]
            .iter()
            .map(OsString::from)
            .collect();
        let line = shell_line(&words);
        let output = std::process::Command::new("sh")
            .args(["-c", &line])
            .output()
            .expect("sh runs");
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            "a b|it's||plain-1.txt|"
        );
    }

    #[test]
    fn command_words_that_are_not_utf8_read_back_as_the_same_bytes_in_bash() {
        use std::os::unix::ffi::OsStringExt;
        let words: Vec<OsString> = vec![
            OsString::from("printf"),
            OsString::from("%s|"),
            OsString::from_vec(b"bad\xffname".to_vec()),
            OsString::from_vec(b"it's \\ \xfe\n\xc3\xa9".to_vec()),
            OsString::from("plain"),
        ];
        let line = shell_line(&words);
        let output = std::process::Command::new("bash")
            .args([OsStr::new("-c"), OsStr::new(&line)])
            .output()
            .expect("bash runs");
        assert_eq!(
            output.stdout, b"bad\xffname|it's \\ \xfe\n\xc3\xa9|plain|",
            "{line}"
        );
        assert!(line.contains("$'bad\\xffname'"), "{line}");
    }

    #[test]
    fn sizes_use_binary_units() {
        assert_eq!(bytes_text(0), "0 B");
        assert_eq!(bytes_text(1023), "1023 B");
        assert_eq!(bytes_text(1536), "1.5 KiB");
        assert_eq!(bytes_text(3 * 1024 * 1024), "3.0 MiB");
    }

    #[test]
    fn plain_names_are_shown_as_they_are_and_others_quoted_like_git() {
        assert_eq!(shown("src/main.rs"), "src/main.rs");
        assert_eq!(shown("ünïcode and spaces.txt"), "ünïcode and spaces.txt");
        assert_eq!(shown("new\nline"), "\"new\\nline\"");
        assert_eq!(shown("tab\there"), "\"tab\\there\"");
        assert_eq!(shown("say \"hi\""), "\"say \\\"hi\\\"\"");
        assert_eq!(shown("back\\slash"), "\"back\\\\slash\"");
        assert_eq!(shown("bell\u{7}"), "\"bell\\x07\"");
        assert_eq!(one_line("two\nlines\tand a tab"), "two\\nlines\\tand a tab");
        assert_eq!(one_line("plain"), "plain");
    }
}
