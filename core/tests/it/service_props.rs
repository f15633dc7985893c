//! Properties of the services on the in-memory adapters, over generated sessions of turns whose steps
//! write, delete and chmod files (SPEC sections 6 and 7).

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;
use rewind_core::RevertTarget;
use rewind_core::model::{MessageId, PartBody, PartId, Role, SessionId};
use rewind_core::service::{NewMessage, NewPart, StepEnd};
use rewind_core::testkit::mem_snapshot::Node;

use crate::support::{Turn, World, block_on};

const PATHS: &[&str] = &["a.txt", "b.txt", "dir/c.txt", "dir/deep/d.txt", "e.sh"];

#[derive(Clone, Debug)]
enum Op {
    Write(usize, u8),
    Delete(usize),
    Chmod(usize, bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..PATHS.len(), any::<u8>()).prop_map(|(p, v)| Op::Write(p, v)),
        1 => (0..PATHS.len()).prop_map(Op::Delete),
        1 => (0..PATHS.len(), any::<bool>()).prop_map(|(p, x)| Op::Chmod(p, x)),
    ]
}

/// Turns of steps of operations.
fn turns() -> impl Strategy<Value = Vec<Vec<Vec<Op>>>> {
    prop::collection::vec(
        prop::collection::vec(prop::collection::vec(op(), 0..4), 1..3),
        1..5,
    )
}

fn apply(w: &World, ops: &[Op]) {
    for op in ops {
        match op {
            Op::Write(p, v) => w.write(PATHS[*p], &format!("{} v{v}\nline two\n", PATHS[*p])),
            Op::Delete(p) => {
                if w.read(PATHS[*p]).is_some() {
                    w.remove(PATHS[*p]);
                }
            }
            Op::Chmod(p, x) => {
                if w.read(PATHS[*p]).is_some() {
                    w.chmod_x(PATHS[*p], *x);
                }
            }
        }
    }
}

/// Records the session and returns its turns with the worktree's state before each turn, and at the end.
async fn record(
    w: &World,
    turns: &[Vec<Vec<Op>>],
) -> (
    rewind_core::model::SessionId,
    Vec<(Turn, BTreeMap<String, Node>)>,
    BTreeMap<String, Node>,
) {
    w.write("a.txt", "a.txt v0\n");
    w.write("dir/c.txt", "c v0\n");
    let s = w.session().await;
    let mut recorded = Vec::new();
    for steps in turns {
        let before = w.files();
        let turn = w.turn(&s.id, "turn", |w| apply(w, &steps[0])).await;
        for ops in &steps[1..] {
            w.step(&s.id, &turn.assistant, |w| apply(w, ops)).await;
        }
        recorded.push((turn, before));
    }
    let end = w.files();
    (s.id, recorded, end)
}

/// A turn's assistant messages, each of its steps with whether it says something (a text part, after its
/// step-start) before its edits.
type Messages = Vec<Vec<(bool, Vec<Op>)>>;

/// Turns of one or more assistant messages of one or more steps of operations.
fn turns_of_several_messages() -> impl Strategy<Value = Vec<Messages>> {
    prop::collection::vec(
        prop::collection::vec(
            prop::collection::vec((any::<bool>(), prop::collection::vec(op(), 0..3)), 1..3),
            1..3,
        ),
        1..4,
    )
}

/// A revert target with the worktree a revert to it must give: the state before its turn, or before the
/// step of a part that text precedes in its own message (SPEC 5: the point stays on such a part, and the
/// patches undone are the hidden range's, the part's own step's included: 12.3).
type Target = (MessageId, Option<PartId>, BTreeMap<String, Node>);

/// Records a session of `turns`; every message and part of it as a target, and the worktree at the end.
async fn record_targets(
    w: &World,
    turns: &[Messages],
) -> (SessionId, Vec<Target>, BTreeMap<String, Node>) {
    w.write("a.txt", "a.txt v0\n");
    w.write("dir/c.txt", "c v0\n");
    let s = w.session().await;
    let mut before_turn = HashMap::new();
    let mut before_step = HashMap::new();
    for messages in turns {
        let state = w.files();
        let user = w
            .rewind
            .create_message(&s.id, NewMessage::user_text("turn"))
            .await
            .expect("user message");
        before_turn.insert(user.info.id.clone(), state);
        for steps in messages {
            let a = w
                .rewind
                .create_message(&s.id, NewMessage::assistant())
                .await
                .expect("assistant message")
                .info
                .id;
            for (k, (talk, ops)) in steps.iter().enumerate() {
                before_step.insert((a.clone(), k), w.files());
                w.rewind.begin_step(&s.id, &a).await.expect("begin");
                if *talk {
                    w.rewind
                        .append_part(&s.id, &a, NewPart::new(PartBody::text("working")))
                        .await
                        .expect("text");
                }
                apply(w, ops);
                w.rewind
                    .finish_step(&s.id, &a, StepEnd::default())
                    .await
                    .expect("finish");
            }
        }
    }
    let end = w.files();
    let mut targets = Vec::new();
    let mut turn_state: Option<BTreeMap<String, Node>> = None;
    for m in w.messages(&s.id).await {
        if m.info.role == Role::User {
            turn_state = before_turn.get(&m.info.id).cloned();
        }
        let turn = turn_state.clone().expect("a user message begins each turn");
        targets.push((m.info.id.clone(), None, turn.clone()));
        let mut talked = false;
        let mut step: Option<usize> = None;
        for part in &m.parts {
            if matches!(part.body, PartBody::StepStart(_)) {
                step = Some(step.map_or(0, |k| k + 1));
            }
            let expected = match (talked, step) {
                (true, Some(k)) => before_step[&(m.info.id.clone(), k)].clone(),
                _ => turn.clone(),
            };
            targets.push((m.info.id.clone(), Some(part.id.clone()), expected));
            talked |= matches!(part.body, PartBody::Text(_) | PartBody::Tool(_));
        }
    }
    (s.id, targets, end)
}

proptest! {
    #![proptest_config(ProptestConfig::default())]

    /// Any message or part of turns of several assistant messages as the target, through the service: the
    /// worktree is the state the target's turn or step began with (SPEC 5 and 12.3: a target inside a turn
    /// undoes the turn's earlier messages' patches too, unless text in its own message keeps the point on
    /// the part); a second revert equals a single revert to its target; unrevert gives back the worktree.
    #[test]
    fn revert_to_any_message_or_part_is_exact(turns in turns_of_several_messages(), first in any::<prop::sample::Index>(), second in any::<prop::sample::Index>()) {
        block_on(async {
            let w = World::new();
            let (s, targets, end) = record_targets(&w, &turns).await;
            for index in [first, second] {
                let (message_id, part_id, expected) = &targets[index.index(targets.len())];
                w.rewind
                    .revert(&s, RevertTarget { message_id: message_id.clone(), part_id: part_id.clone() })
                    .await
                    .expect("revert");
                assert_eq!(&w.files(), expected, "revert to {message_id} {part_id:?}");
            }
            w.rewind.unrevert(&s).await.expect("unrevert");
            assert_eq!(w.files(), end, "unrevert gives back the pre-revert worktree");
            assert!(w.rewind.warnings(&s).await.expect("warnings").is_empty(), "no warning without user edits");
        });
    }

    /// Reverting to a turn gives the worktree as it was before that turn (the independent oracle: the
    /// states recorded while the session ran); reverting to one point and then another equals a single
    /// revert to the second; unrevert gives back the pre-revert worktree byte for byte, modes included.
    #[test]
    fn revert_re_revert_and_unrevert_are_exact(turns in turns(), first in any::<prop::sample::Index>(), second in any::<prop::sample::Index>()) {
        block_on(async {
            let w = World::new();
            let (s, recorded, end) = record(&w, &turns).await;
            let (t1, state1) = &recorded[first.index(recorded.len())];
            let (t2, state2) = &recorded[second.index(recorded.len())];

            w.revert_to(&s, &t1.user).await;
            assert_eq!(&w.files(), state1, "revert to a turn gives the state before it");
            w.revert_to(&s, &t2.user).await;
            assert_eq!(&w.files(), state2, "a second revert equals a single revert to the second point");
            w.rewind.unrevert(&s).await.expect("unrevert");
            assert_eq!(w.files(), end, "unrevert gives back the pre-revert worktree");
            assert!(w.rewind.warnings(&s).await.expect("warnings").is_empty(), "no warning without user edits");
        });
    }

    /// A file the user creates or edits while reverted is never lost: after unrevert or a re-revert it is
    /// on disk with the user's content, or in a capture that a warning names.
    #[test]
    fn user_files_made_while_reverted_are_never_lost(turns in turns(), target in any::<prop::sample::Index>(), edited in 0..PATHS.len(), unrevert in any::<bool>()) {
        block_on(async {
            let w = World::new();
            let (s, recorded, _) = record(&w, &turns).await;
            let (t, _) = &recorded[target.index(recorded.len())];
            w.revert_to(&s, &t.user).await;
            w.write("mine/new.txt", "created while reverted");
            let path = PATHS[edited];
            w.write(path, "edited while reverted");
            if unrevert {
                w.rewind.unrevert(&s).await.expect("unrevert");
            } else {
                w.revert_to(&s, &recorded[0].0.user).await;
            }
            assert_eq!(w.read("mine/new.txt").as_deref(), Some("created while reverted"));
            if w.read(path).as_deref() != Some("edited while reverted") {
                let warnings = w.rewind.warnings(&s).await.expect("warnings");
                let kept = warnings.iter().filter(|x| x.files.contains(&w.abs(path))).any(|x| {
                    x.snapshot.as_ref().and_then(|id| w.snapshots.tree(w.path(), id)).is_some_and(|tree| {
                        tree.get(path).map(|n| n.content().to_vec()) == Some(b"edited while reverted".to_vec())
                    })
                });
                assert!(kept, "the user's version of {path} is in a capture named by a warning");
            }
        });
    }

    /// Nothing a revert overwrites is lost after cleanup: the revert history keeps the pre-revert
    /// snapshot, which holds the whole pre-revert worktree, and the database still references it for gc.
    #[test]
    fn nothing_a_revert_overwrites_is_lost_after_cleanup(turns in turns(), target in any::<prop::sample::Index>()) {
        block_on(async {
            let w = World::new();
            let (s, recorded, end) = record(&w, &turns).await;
            let (t, _) = &recorded[target.index(recorded.len())];
            w.revert_to(&s, &t.user).await;
            w.rewind.commit_revert(&s).await.expect("cleanup");
            let history = w.rewind.revert_history(&s).await.expect("history");
            let snapshot = history[0].descriptor.snapshot.clone().expect("pre-revert snapshot");
            assert_eq!(w.snapshots.tree(w.path(), &snapshot), Some(end));
            let referenced = rewind_core::MessageRepo::referenced_snapshots(&*w.repo, None).await.expect("refs");
            assert!(referenced.contains(&snapshot));
        });
    }
}
