//! The revert point (SPEC section 5): a table of hand-written cases with their expected descriptors, and
//! properties over generated sessions checked against a positional statement of the hidden range.

use proptest::prelude::*;
use rewind_core::Error;
use rewind_core::model::{MessageWithParts, PartId, Role};
use rewind_core::revert::{
    RevertPoint, RevertTarget, cleanup_plan, hidden_patches, select_revert_point,
};
use rewind_core::testkit::strategies::{
    MessageShape, PartShape, TargetKind, build_session, session_and_target,
};

use PartShape::*;

fn user(parts: &[PartShape]) -> MessageShape {
    MessageShape {
        role: Role::User,
        parts: parts.to_vec(),
    }
}

fn assistant(parts: &[PartShape]) -> MessageShape {
    MessageShape {
        role: Role::Assistant,
        parts: parts.to_vec(),
    }
}

fn patch(files: &[&str]) -> PartShape {
    Patch(files.iter().map(|f| (*f).to_owned()).collect())
}

/// U0 [text]; A1 [step-start, tool, step-finish, patch a]; A2 [step-start, text, tool, step-finish, patch b];
/// U3 [text, text]; A4 []; A5 [step-start, step-finish, patch c]; U6 []
fn fixture() -> Vec<MessageWithParts> {
    build_session(&[
        user(&[Text]),
        assistant(&[StepStart, Tool, StepFinish, patch(&["a.txt"])]),
        assistant(&[StepStart, Text, Tool, StepFinish, patch(&["b.txt"])]),
        user(&[Text, Text]),
        assistant(&[]),
        assistant(&[StepStart, StepFinish, patch(&["c.txt"])]),
        user(&[]),
    ])
}

fn target(s: &[MessageWithParts], message: usize, part: Option<(usize, usize)>) -> RevertTarget {
    RevertTarget {
        message_id: s[message].info.id.clone(),
        part_id: part.map(|(m, p)| s[m].parts[p].id.clone()),
    }
}

fn point(s: &[MessageWithParts], message: usize, part: Option<usize>) -> RevertPoint {
    RevertPoint {
        message_id: s[message].info.id.clone(),
        part_id: part.map(|p| s[message].parts[p].id.clone()),
    }
}

/// (case, target message, target part (message, index), expected point message, expected part index)
type Case = (
    &'static str,
    usize,
    Option<(usize, usize)>,
    usize,
    Option<usize>,
);

#[test]
fn table_of_revert_points() {
    let s = fixture();
    let cases: &[Case] = &[
        ("a user message is its own point", 3, None, 3, None),
        (
            "an assistant message moves back to its turn's user message",
            2,
            None,
            0,
            None,
        ),
        (
            "a later assistant message of a turn also moves back to the user message",
            5,
            None,
            3,
            None,
        ),
        (
            "a message without parts still matches by id",
            4,
            None,
            3,
            None,
        ),
        (
            "a user message without parts matches by id",
            6,
            None,
            6,
            None,
        ),
        (
            "a part preceded by text in its message is kept",
            2,
            Some((2, 2)),
            2,
            Some(2),
        ),
        (
            "a part preceded by a tool part in its message is kept",
            1,
            Some((1, 2)),
            1,
            Some(2),
        ),
        (
            "a step-finish after text and tool is kept",
            2,
            Some((2, 3)),
            2,
            Some(3),
        ),
        (
            "the first part of a message moves back to the user message",
            1,
            Some((1, 0)),
            0,
            None,
        ),
        (
            "a part preceded only by step-start moves back to the user message",
            5,
            Some((5, 1)),
            3,
            None,
        ),
        (
            "a user message's second text part is kept",
            3,
            Some((3, 1)),
            3,
            Some(1),
        ),
        (
            "a user message's first part is the whole message",
            3,
            Some((3, 0)),
            3,
            None,
        ),
        (
            "the part id alone decides the match, whatever message is named",
            0,
            Some((2, 2)),
            2,
            Some(2),
        ),
    ];
    for (name, message, part, expected_message, expected_part) in cases {
        let got = select_revert_point(&s, &target(&s, *message, *part))
            .unwrap_or_else(|e| panic!("{name}: unexpected error {e}"));
        assert_eq!(got, point(&s, *expected_message, *expected_part), "{name}");
    }
}

#[test]
fn an_assistant_message_before_any_user_message_is_its_own_point() {
    let s = build_session(&[assistant(&[StepStart, StepFinish]), user(&[Text])]);
    assert_eq!(
        select_revert_point(&s, &target(&s, 0, None)).ok(),
        Some(point(&s, 0, None))
    );
    assert_eq!(
        select_revert_point(&s, &target(&s, 0, Some((0, 1)))).ok(),
        Some(point(&s, 0, None))
    );
}

#[test]
fn unknown_targets_are_not_found() {
    let s = fixture();
    let other = build_session(&[user(&[Text])]);
    let unknown_message = RevertTarget {
        message_id: other[0].info.id.clone(),
        part_id: None,
    };
    let unknown_part = RevertTarget {
        message_id: s[0].info.id.clone(),
        part_id: Some(other[0].parts[0].id.clone()),
    };
    let known_part_unknown_message = RevertTarget {
        message_id: other[0].info.id.clone(),
        part_id: Some(s[1].parts[1].id.clone()),
    };
    for t in [unknown_message, unknown_part, known_part_unknown_message] {
        assert!(
            matches!(select_revert_point(&s, &t), Err(Error::NotFound(_))),
            "{t:?}"
        );
    }
    let empty: Vec<MessageWithParts> = Vec::new();
    assert!(matches!(
        select_revert_point(&empty, &target(&s, 0, None)),
        Err(Error::NotFound(_))
    ));
}

#[test]
fn hidden_patches_of_a_kept_part_include_the_matched_step_and_later_ones() {
    let s = fixture();
    // Point {A2, text}: A2's patch b (after the text) and A5's patch c are undone; A1's patch a is not.
    let p = point(&s, 2, Some(2));
    let files: Vec<&str> = hidden_patches(&s, &p)
        .iter()
        .flat_map(|p| p.files.iter().map(String::as_str))
        .collect();
    assert_eq!(files, ["/wt/b.txt", "/wt/c.txt"]);
    // Point {U0}: everything.
    let files: Vec<&str> = hidden_patches(&s, &point(&s, 0, None))
        .iter()
        .flat_map(|p| p.files.iter().map(String::as_str))
        .collect();
    assert_eq!(files, ["/wt/a.txt", "/wt/b.txt", "/wt/c.txt"]);
}

/// The hidden range stated by position, independently of the id comparisons the library uses: every
/// message after the point's message, and the point's message whole or from the index of its part on.
fn hidden_by_position(s: &[MessageWithParts], p: &RevertPoint) -> Vec<(usize, usize)> {
    let m = s
        .iter()
        .position(|x| x.info.id == p.message_id)
        .expect("point's message exists");
    let mut hidden = Vec::new();
    for (i, message) in s.iter().enumerate().skip(m) {
        let from = match (&p.part_id, i == m) {
            (Some(part), true) => message
                .parts
                .iter()
                .position(|x| &x.id == part)
                .expect("point's part exists"),
            _ => 0,
        };
        hidden.extend((from..message.parts.len()).map(|j| (i, j)));
    }
    hidden
}

fn location(s: &[MessageWithParts], part: &PartId) -> (usize, usize) {
    s.iter()
        .enumerate()
        .find_map(|(i, m)| m.parts.iter().position(|p| &p.id == part).map(|j| (i, j)))
        .expect("part exists")
}

proptest! {
    #![proptest_config(ProptestConfig::default())]

    #[test]
    fn revert_point_properties((s, t, kind) in session_and_target()) {
        let result = select_revert_point(&s, &t);
        if matches!(kind, TargetKind::UnknownMessage | TargetKind::UnknownPart) {
            prop_assert!(matches!(result, Err(Error::NotFound(_))));
            return Ok(());
        }
        let p = result.map_err(|e| TestCaseError::fail(e.to_string()))?;
        let m = s.iter().position(|x| x.info.id == p.message_id);
        prop_assert!(m.is_some(), "the descriptor's message exists");
        let m = m.unwrap_or_default();
        let earlier_user = s[..=m].iter().any(|x| x.info.role == Role::User);

        // A user message, unless a kept part or the absence of an earlier user message explains otherwise.
        if p.part_id.is_none() && earlier_user {
            prop_assert_eq!(s[m].info.role, Role::User);
        }
        // A kept part is preceded by text or tool output in its own message.
        if let Some(part) = &p.part_id {
            let (pm, pj) = location(&s, part);
            prop_assert_eq!(pm, m);
            prop_assert!(s[m].parts[..pj].iter().any(|x| x.is_text_or_tool()));
        }

        let hidden = hidden_by_position(&s, &p);
        // The target lies in the hidden range.
        match &t.part_id {
            Some(part) => prop_assert!(hidden.contains(&location(&s, part))),
            None => {
                let tm = s.iter().position(|x| x.info.id == t.message_id).unwrap_or_default();
                prop_assert!(tm >= m);
                prop_assert!(s[tm].parts.iter().enumerate().all(|(j, _)| hidden.contains(&(tm, j))));
            }
        }

        // The patches undone are exactly the patch parts in the hidden range, in order.
        let expected: Vec<_> = hidden
            .iter()
            .filter_map(|&(i, j)| s[i].parts[j].as_patch())
            .collect();
        let undone = hidden_patches(&s, &p);
        prop_assert_eq!(undone, expected);

        // Cleanup removes exactly the hidden range.
        let plan = cleanup_plan(&s, &p);
        let mut removed: Vec<(usize, usize)> = Vec::new();
        for id in &plan.removed_messages {
            let i = s.iter().position(|x| &x.info.id == id).unwrap_or_default();
            removed.extend((0..s[i].parts.len()).map(|j| (i, j)));
        }
        for (_, part) in &plan.removed_parts {
            removed.push(location(&s, part));
        }
        removed.sort();
        prop_assert_eq!(&removed, &hidden);
        // Whole messages go exactly from the point's message (or the one after it, for a kept part).
        let first_whole = if p.part_id.is_some() { m + 1 } else { m };
        let expected_messages: Vec<_> = s[first_whole..].iter().map(|x| x.info.id.clone()).collect();
        prop_assert_eq!(&plan.removed_messages, &expected_messages);
    }
}
