//! Ids (SPEC section 3) and the JSON shapes of the domain types (OpenCode's field names, optional fields
//! left out).

use rewind_core::id::{Id, IdGenerator, ensure_sorts_after};
use rewind_core::model::{EventId, MessageId, PartId, Role, SessionId, SnapshotId};
use rewind_core::service::{NewMessage, NewPart};
use rewind_core::{Error, MessageRepo};
use serde_json::json;

use crate::support::{World, block_on};

#[test]
fn ids_have_opencodes_format() {
    let ids = IdGenerator::new();
    let message: MessageId = ids.ascending(1_800_000_000_000, None);
    let text = message.as_str();
    assert_eq!(text.len(), "msg_".len() + 26);
    assert!(text.starts_with("msg_"));
    assert!(
        text[4..16]
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
    assert!(text[16..].bytes().all(|b| b.is_ascii_alphanumeric()));
    // The clock part is the low 48 bits of ms * 4096 (+ counter).
    assert_eq!(
        message.clock(),
        (1_800_000_000_000u64 * 4096) & ((1 << 48) - 1)
    );
    let part: PartId = ids.ascending(1, None);
    let event: EventId = ids.ascending(1, None);
    assert!(part.as_str().starts_with("prt_") && event.as_str().starts_with("evt_"));
}

#[test]
fn ascending_ids_keep_creation_order_when_the_clock_steps_back() {
    let ids = IdGenerator::new();
    let mut last: Option<MessageId> = None;
    for now in [5_000u64, 5_000, 4_000, 4_000, 6_000, 1] {
        let id: MessageId = ids.ascending(now, None);
        if let Some(last) = &last {
            assert!(id > *last, "{id} after {last}");
        }
        last = Some(id);
    }
}

#[test]
fn generated_ids_sort_after_a_clients_id_from_the_future() {
    let ids = IdGenerator::new();
    let future: MessageId = IdGenerator::new().ascending(9_000_000_000_000, None);
    let next: MessageId = ids.ascending(1_000, Some(&future));
    assert!(next > future);
}

#[test]
fn session_ids_descend_so_newer_sessions_sort_first() {
    let ids = IdGenerator::new();
    let older: SessionId = ids.descending(1_000);
    let newer: SessionId = ids.descending(2_000);
    assert!(newer < older);
    assert!(
        older.clock() < newer.clock(),
        "clock() undoes the inversion"
    );
}

#[test]
fn malformed_ids_are_refused_with_a_clear_error() {
    for bad in [
        "",
        "msg",
        "msg_",
        "prt_0123456789abABCDEFGHIJKLMN",
        "msg_0123456789aXABCDEFGHIJKLMN",
        "msg_0123456789abABCDEFGHIJKLM",
        "msg_0123456789abABCDEFGHIJKL-N",
    ] {
        match MessageId::parse(bad) {
            Err(Error::InvalidInput(message)) => {
                assert!(message.contains("malformed id"), "{message}")
            }
            other => panic!("{bad:?} gave {other:?}"),
        }
    }
    assert!(MessageId::parse("msg_0123456789abABCDEFGHIJKLMN").is_ok());
    let from_json: Result<MessageId, _> =
        serde_json::from_value(json!("ses_0123456789abABCDEFGHIJKLMN"));
    assert!(from_json.is_err(), "a session id is not a message id");
    assert!(SnapshotId::parse("4b825dc642cb6eb9a060e54bf8d69288fbee4904").is_ok());
    assert!(SnapshotId::parse("4B825DC642CB6EB9A060E54BF8D69288FBEE4904").is_err());
}

#[test]
fn client_ids_must_sort_after_existing_ones() {
    let ids = IdGenerator::new();
    let first: MessageId = ids.ascending(1_000, None);
    let second: MessageId = ids.ascending(2_000, None);
    assert!(ensure_sorts_after(&second, Some(&first)).is_ok());
    assert!(matches!(
        ensure_sorts_after(&first, Some(&second)),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        ensure_sorts_after(&first, Some(&first)),
        Err(Error::InvalidInput(_))
    ));
    assert!(ensure_sorts_after(&first, None).is_ok());
}

#[test]
fn the_service_refuses_a_client_id_out_of_order_and_stores_nothing() {
    block_on(async {
        let w = World::new();
        let s = w.session().await;
        let early: MessageId = IdGenerator::new().ascending(1, None);
        let kept = w
            .rewind
            .create_message(&s.id, NewMessage::user_text("first"))
            .await
            .expect("message");
        let seq = w.last_seq().await;
        let mut late = NewMessage::user_text("out of order");
        late.id = Some(early);
        let result = w.rewind.create_message(&s.id, late).await;
        assert!(matches!(result, Err(Error::InvalidInput(_))), "{result:?}");
        let early_part: PartId = IdGenerator::new().ascending(1, None);
        let part = w
            .rewind
            .append_part(
                &s.id,
                &kept.info.id,
                NewPart {
                    id: Some(early_part),
                    body: rewind_core::model::PartBody::text("x"),
                },
            )
            .await;
        assert!(matches!(part, Err(Error::InvalidInput(_))), "{part:?}");
        assert_eq!(w.messages(&s.id).await.len(), 1);
        assert_eq!(w.last_seq().await, seq, "no event");
        // A client's own id that sorts after is kept as given.
        let own: MessageId = IdGenerator::new().ascending(9_000_000_000_000, None);
        let mut message = NewMessage::user_text("mine");
        message.id = Some(own.clone());
        let stored = w
            .rewind
            .create_message(&s.id, message)
            .await
            .expect("stored");
        assert_eq!(stored.info.id, own);
        assert_eq!(stored.info.role, Role::User);
    })
}

/// Begins a turn whose user message's part has the id `part`, which a part of message `holder` has: it
/// must be refused, naming the holder.
async fn turn_is_refused(w: &World, session: &SessionId, part: &PartId, holder: &MessageId) {
    let mut user = NewMessage::user_text("a turn");
    user.parts[0].id = Some(part.clone());
    let turn = w
        .rewind
        .begin_turn(session, user, NewMessage::assistant())
        .await;
    assert!(
        matches!(&turn, Err(Error::InvalidInput(m)) if m.contains(holder.as_str())),
        "{turn:?}"
    );
}

/// A revert finds its target part by id alone (SPEC 5), so a part id a part of another message already has
/// would make a revert to the new part land on the old one and undo the wrong turn: it is refused, by every
/// operation that takes a client's part ids, and nothing is stored. Another session may use it.
#[test]
fn a_part_id_another_message_of_the_session_has_is_refused_and_stores_nothing() {
    block_on(async {
        let w = World::new();
        let s = w.session().await;
        let first = w
            .rewind
            .create_message(&s.id, NewMessage::user_text("first"))
            .await
            .expect("message");
        let taken = first.parts[0].id.clone();
        let seq = w.last_seq().await;

        let mut again = NewMessage::user_text("second");
        again.parts[0].id = Some(taken.clone());
        let result = w.rewind.create_message(&s.id, again).await;
        let Err(Error::InvalidInput(message)) = result else {
            panic!("refused: {result:?}");
        };
        assert!(
            message.contains(taken.as_str()) && message.contains(first.info.id.as_str()),
            "names the id and the message that has it: {message}"
        );

        let second = w
            .rewind
            .create_message(&s.id, NewMessage::user_text("second"))
            .await
            .expect("message");
        let seq_after_second = w.last_seq().await;
        assert!(seq_after_second > seq);
        let part = w
            .rewind
            .append_part(
                &s.id,
                &second.info.id,
                NewPart {
                    id: Some(taken.clone()),
                    body: rewind_core::model::PartBody::text("x"),
                },
            )
            .await;
        assert!(matches!(part, Err(Error::InvalidInput(_))), "{part:?}");
        // A turn begun in one call: its messages' ids are checked against the session's parts (by the
        // commit's guard, the session's parts not being read), and against each other.
        turn_is_refused(&w, &s.id, &taken, &first.info.id).await;
        let mut user = NewMessage::user_text("a turn");
        let mut assistant = NewMessage::assistant();
        let shared =
            rewind_core::model::PartId::parse("prt_fffffffffff0aaaaaaaaaaaaaa").expect("a part id");
        user.parts[0].id = Some(shared.clone());
        assistant.parts.push(NewPart {
            id: Some(shared.clone()),
            body: rewind_core::model::PartBody::text("the same id"),
        });
        let turn = w.rewind.begin_turn(&s.id, user, assistant).await;
        assert!(
            matches!(&turn, Err(Error::InvalidInput(m)) if m.contains(shared.as_str())),
            "{turn:?}"
        );
        let messages = w.messages(&s.id).await;
        assert_eq!(messages.len(), 2);
        let holding: Vec<_> = messages
            .iter()
            .flat_map(|m| &m.parts)
            .filter(|p| p.id == taken)
            .collect();
        assert_eq!(holding.len(), 1, "only the first part has the id");
        assert_eq!(w.last_seq().await, seq_after_second, "no event");

        let other = w.session().await;
        let mut elsewhere = NewMessage::user_text("in another session");
        elsewhere.parts[0].id = Some(taken.clone());
        let stored = w
            .rewind
            .create_message(&other.id, elsewhere)
            .await
            .expect("another session may use the id");
        assert_eq!(stored.parts[0].id, taken);
    })
}

/// While a session is reverted to a part, the parts of that message from the part on are deleted by the
/// cleanup a new message runs first: their ids are free for the new message, not refused.
#[test]
fn a_part_id_the_cleanup_deletes_is_free_for_the_message_that_runs_it() {
    for turn in [false, true] {
        a_part_id_the_cleanup_deletes_is_free_for(turn);
    }
}

fn a_part_id_the_cleanup_deletes_is_free_for(turn: bool) {
    block_on(async {
        let w = World::new();
        let s = w.session().await;
        let (_, assistant) = w.exchange(&s.id, "one").await;
        w.rewind
            .append_part(
                &s.id,
                &assistant.info.id,
                NewPart::new(rewind_core::model::PartBody::text("thinking")),
            )
            .await
            .expect("text part");
        let step = w
            .step(&s.id, &assistant.info.id, |w| w.write("a.txt", "1"))
            .await;
        let start = step[0].id.clone();
        let reverted = w
            .rewind
            .revert(
                &s.id,
                rewind_core::RevertTarget {
                    message_id: assistant.info.id.clone(),
                    part_id: Some(start.clone()),
                },
            )
            .await
            .expect("revert to the step's start");
        assert_eq!(
            reverted.revert.as_ref().and_then(|r| r.part_id.clone()),
            Some(start.clone()),
            "the text before it keeps the point in its message"
        );

        // So does a turn begun in one call (`rewind exec`), whose step stores the cleanup.
        let mut reuse = NewMessage::user_text("two");
        reuse.parts[0].id = Some(start.clone());
        let stored = if turn {
            w.rewind
                .begin_turn(&s.id, reuse, NewMessage::assistant())
                .await
                .expect("the id of a part the cleanup deletes is free")
                .0
        } else {
            w.rewind
                .create_message(&s.id, reuse)
                .await
                .expect("the id of a part the cleanup deletes is free")
        };
        assert_eq!(stored.parts[0].id, start);
        let holding = w
            .messages(&s.id)
            .await
            .iter()
            .flat_map(|m| m.parts.iter())
            .filter(|p| p.id == start)
            .count();
        assert_eq!(holding, 1);
    })
}

/// A step begun on the message a revert point lies in takes its id after the parts the cleanup keeps,
/// not after those it cuts in the same transaction (one a client gave a far-future id, say): the
/// message's next ids are not pushed after a part that no longer exists (review).
#[test]
fn a_step_begun_at_the_revert_point_follows_the_parts_the_cleanup_keeps() {
    block_on(async {
        let w = World::new();
        let s = w.session().await;
        let (_, assistant) = w.exchange(&s.id, "one").await;
        let kept = w
            .rewind
            .append_part(
                &s.id,
                &assistant.info.id,
                NewPart::new(rewind_core::model::PartBody::text("kept")),
            )
            .await
            .expect("text part");
        let far = rewind_core::model::PartId::parse("prt_fffffffff000aaaaaaaaaaaaaa").expect("id");
        let mut future = NewPart::new(rewind_core::model::PartBody::text("from a fast clock"));
        future.id = Some(far.clone());
        w.rewind
            .append_part(&s.id, &assistant.info.id, future)
            .await
            .expect("a far-future id sorts after");
        w.rewind
            .revert(
                &s.id,
                rewind_core::RevertTarget {
                    message_id: assistant.info.id.clone(),
                    part_id: Some(far.clone()),
                },
            )
            .await
            .expect("revert to the far part");
        let start = w
            .rewind
            .begin_step(&s.id, &assistant.info.id)
            .await
            .expect("the step begins, after the cleanup");
        assert!(start.id > kept.id, "after the kept part");
        assert!(
            start.id < far,
            "not after the part the cleanup cut: {}",
            start.id
        );
        let ids: Vec<_> = w
            .rewind
            .message(&s.id, &assistant.info.id)
            .await
            .expect("message")
            .parts
            .into_iter()
            .map(|p| p.id)
            .collect();
        assert_eq!(ids.last(), Some(&start.id));
        assert!(!ids.contains(&far), "the far part was cut");
    })
}

/// While a session is reverted, a new message first runs the cleanup that deletes the hidden messages for
/// good. A part id a kept message holds is refused before that: the session stays reverted, its redo
/// history whole (the commit's guard alone would refuse it only after the cleanup).
#[test]
fn a_part_id_a_kept_message_holds_is_refused_before_the_cleanup() {
    block_on(async {
        let w = World::new();
        let s = w.session().await;
        let (first, assistant) = w.exchange(&s.id, "one").await;
        let kept = first.parts[0].id.clone();
        w.step(&s.id, &assistant.info.id, |w| w.write("a.txt", "1"))
            .await;
        let (second, answer) = w.exchange(&s.id, "two").await;
        w.step(&s.id, &answer.info.id, |w| w.write("b.txt", "2"))
            .await;
        w.rewind
            .revert(
                &s.id,
                rewind_core::RevertTarget {
                    message_id: second.info.id.clone(),
                    part_id: None,
                },
            )
            .await
            .expect("revert the second turn");
        let before = w.messages(&s.id).await;
        let seq = w.last_seq().await;

        let mut message = NewMessage::user_text("three");
        message.parts[0].id = Some(kept.clone());
        let created = w.rewind.create_message(&s.id, message).await;
        assert!(
            matches!(&created, Err(Error::InvalidInput(m)) if m.contains(first.info.id.as_str())),
            "{created:?}"
        );
        turn_is_refused(&w, &s.id, &kept, &first.info.id).await;

        assert_eq!(
            w.messages(&s.id).await,
            before,
            "the hidden turn is still there"
        );
        assert!(w.is_reverted(&s.id).await, "the session is still reverted");
        assert_eq!(w.last_seq().await, seq, "no event");
    })
}

/// A message's own fields cannot come among its other fields (`extra`): stored twice, the message and its
/// whole session could not be read back (black-box: `sessionID` and `time` in a message body).
#[test]
fn a_message_s_own_fields_are_refused_among_its_other_fields() {
    block_on(async {
        let w = World::new();
        let s = w.session().await;
        let (_, assistant) = w.exchange(&s.id, "one").await;
        // The oracle: the fields a stored message has of its own, as it is written out (not those kept
        // among its other fields, which a client may give: `agent`, `cost`, …).
        let serde_json::Value::Object(mut own) =
            serde_json::to_value(&assistant.info).expect("json")
        else {
            panic!("a message is an object");
        };
        own.retain(|key, _| !assistant.info.extra.contains_key(key));
        assert!(own.len() >= 5, "{own:?}");
        let before = w.messages(&s.id).await;
        for key in own.keys() {
            let mut message = NewMessage::user_text("two");
            message
                .extra
                .insert(key.clone(), serde_json::json!({"created": 1}));
            let created = w.rewind.create_message(&s.id, message).await;
            assert!(
                matches!(&created, Err(Error::InvalidInput(m)) if m.contains(key.as_str())),
                "{key}: {created:?}"
            );
        }
        assert_eq!(
            w.messages(&s.id).await,
            before,
            "nothing stored, all readable"
        );
    })
}

/// The fields OpenCode's schema requires of a message are there when the client leaves them out (a
/// client typed against it reads `tokens.output` of every assistant message, black-box), and kept when it
/// gives them; an assistant message's `cost` is the sum of its steps' and its `tokens` its last step's,
/// as OpenCode's processor sets them.
#[test]
fn messages_have_the_fields_opencode_s_schema_requires() {
    block_on(async {
        let w = World::new();
        let s = w.session().await;
        let user = w
            .rewind
            .create_message(&s.id, NewMessage::user_text("go"))
            .await
            .expect("user")
            .info
            .id;
        let mut given = NewMessage::assistant();
        given.parent_id = Some(user.clone());
        given.extra.insert("modelID".to_owned(), json!("model-x"));
        let given = w
            .rewind
            .create_message(&s.id, given)
            .await
            .expect("assistant");
        let info = serde_json::to_value(&given.info).expect("json");
        assert_eq!(info["modelID"], "model-x", "given: kept");
        assert_eq!(info["providerID"], "");
        assert_eq!(info["mode"], "");
        assert_eq!(info["agent"], "");
        assert_eq!(
            info["path"],
            json!({"cwd": s.directory, "root": s.directory})
        );
        assert_eq!(info["cost"], json!(0));
        assert_eq!(
            info["tokens"],
            json!({"input": 0, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}})
        );
        let tokens = |output: f64| rewind_core::model::Tokens {
            output,
            ..Default::default()
        };
        for (cost, output) in [(0.5, 10.0), (0.25, 7.0)] {
            w.rewind
                .begin_step(&s.id, &given.info.id)
                .await
                .expect("begin");
            w.rewind
                .finish_step(
                    &s.id,
                    &given.info.id,
                    rewind_core::service::StepEnd {
                        cost: Some(cost),
                        tokens: Some(tokens(output)),
                        ..Default::default()
                    },
                )
                .await
                .expect("finish");
        }
        // A step that says nothing of its usage leaves the tokens as they were.
        w.rewind
            .begin_step(&s.id, &given.info.id)
            .await
            .expect("begin");
        w.rewind
            .finish_step(&s.id, &given.info.id, Default::default())
            .await
            .expect("finish");
        let stored = w
            .rewind
            .message(&s.id, &given.info.id)
            .await
            .expect("message");
        let info = serde_json::to_value(&stored.info).expect("json");
        assert_eq!(info["cost"], json!(0.75));
        assert_eq!(info["tokens"]["output"], json!(7));
        assert_eq!(info["modelID"], "model-x");
        // The last `message.updated` says the same.
        let events = w.events().await;
        let last = events
            .iter()
            .rev()
            .find_map(|e| match &e.event.payload {
                rewind_core::model::EventPayload::MessageUpdated { info, .. }
                    if info.id == given.info.id =>
                {
                    Some(info.clone())
                }
                _ => None,
            })
            .expect("message.updated");
        assert_eq!(*last, stored.info);
        let user = w.rewind.message(&s.id, &user).await.expect("user");
        let info = serde_json::to_value(&user.info).expect("json");
        assert_eq!(info["agent"], "");
        assert_eq!(info["model"], json!({"providerID": "", "modelID": ""}));
        assert!(info.get("cost").is_none(), "{info}");
        // A message stored without them (by an older rewind) gets them when read (review).
        let mut old = stored.info.clone();
        for key in ["modelID", "tokens", "path"] {
            old.extra.remove(key);
        }
        w.repo
            .commit(rewind_core::Transaction {
                guards: Vec::new(),
                changes: vec![rewind_core::Change::PutMessage(Box::new(old))],
                events: Vec::new(),
            })
            .await
            .expect("store it as an older rewind did");
        let read = w
            .rewind
            .message(&s.id, &given.info.id)
            .await
            .expect("message");
        let info = serde_json::to_value(&read.info).expect("json");
        assert_eq!(info["modelID"], "");
        assert_eq!(info["tokens"]["output"], json!(0));
        assert_eq!(info["path"]["cwd"], json!(s.directory));
        let listed = w.messages(&s.id).await;
        assert_eq!(listed[1].info, read.info);
    })
}

#[test]
fn json_shapes_are_opencodes() {
    block_on(async {
        let w = World::new();
        let s = w.session().await;
        let session = serde_json::to_value(&s).expect("json");
        for field in [
            "id",
            "slug",
            "projectID",
            "directory",
            "title",
            "version",
            "time",
        ] {
            assert!(session.get(field).is_some(), "session has {field}");
        }
        for absent in ["revert", "summary", "applied", "step", "revertedAt"] {
            assert!(
                session.get(absent).is_none(),
                "optional {absent} is left out, not null"
            );
        }
        let t = w.turn(&s.id, "go", |w| w.write("a.txt", "1")).await;
        let message = w
            .rewind
            .message(&s.id, &t.assistant)
            .await
            .expect("message");
        let json = serde_json::to_value(&message).expect("json");
        assert_eq!(json["info"]["role"], "assistant");
        assert_eq!(json["info"]["parentID"], t.user.as_str());
        assert_eq!(json["info"]["sessionID"], s.id.as_str());
        let kinds: Vec<_> = json["parts"]
            .as_array()
            .expect("parts")
            .iter()
            .map(|p| p["type"].clone())
            .collect();
        assert_eq!(
            kinds,
            [json!("step-start"), json!("step-finish"), json!("patch")]
        );
        let patch = &json["parts"][2];
        assert_eq!(patch["files"], json!([w.abs("a.txt")]));
        assert_eq!(patch["messageID"], t.assistant.as_str());
        let events = w.events().await;
        let event = serde_json::to_value(&events[0].event).expect("json");
        assert_eq!(event["type"], "session.created");
        assert!(
            event["id"]
                .as_str()
                .is_some_and(|id| id.starts_with("evt_"))
        );
        assert_eq!(event["properties"]["sessionID"], s.id.as_str());
        let back: rewind_core::model::Event = serde_json::from_value(event).expect("parses back");
        assert_eq!(back, events[0].event);
    })
}

/// The directory filter of `sessions` is normalised as `create_session` normalises what it stores: a
/// trailing slash finds the same sessions, another directory none, and a relative or `..` path is refused.
#[test]
fn the_session_list_filter_is_normalised_like_the_stored_directory() {
    block_on(async {
        let w = World::new();
        let s = w.session().await;
        for filter in [
            crate::support::ROOT.to_owned(),
            format!("{}/", crate::support::ROOT),
        ] {
            let listed = w.rewind.sessions(Some(&filter)).await.expect("list");
            assert_eq!(
                listed.iter().map(|x| &x.id).collect::<Vec<_>>(),
                [&s.id],
                "{filter}"
            );
        }
        assert!(
            w.rewind
                .sessions(Some("/work/other"))
                .await
                .expect("list")
                .is_empty()
        );
        for bad in ["work/project", "/work/../work/project"] {
            assert!(
                matches!(
                    w.rewind.sessions(Some(bad)).await,
                    Err(Error::InvalidInput(_))
                ),
                "{bad}"
            );
        }
    })
}

/// A backslash is a character of a directory's name (SPEC 12.10): `/work/a\b` is stored as it is and is
/// not the directory `/work/a/b`, whose filter finds nothing.
#[test]
fn a_backslash_in_a_worktree_s_name_is_kept_and_names_no_other_directory() {
    block_on(async {
        let w = World::new();
        let session = w
            .rewind
            .create_session("/work/a\\b", None)
            .await
            .expect("create");
        assert_eq!(session.directory, "/work/a\\b");
        let listed = w.rewind.sessions(Some("/work/a\\b")).await.expect("list");
        assert_eq!(listed.len(), 1);
        assert!(
            w.rewind
                .sessions(Some("/work/a/b"))
                .await
                .expect("list")
                .is_empty()
        );
    })
}

/// A client's id that runs far ahead of the clock moves only its own session: the next id rewind makes
/// there follows it, while another session's ids keep the wall clock and their creation order. An id at
/// the very top of the clock is refused (400), stores nothing, and leaves every later id in order.
#[test]
fn a_client_id_far_ahead_stays_in_its_session_and_one_at_the_top_of_the_clock_is_refused() {
    block_on(async {
        let w = World::new();
        let a = w.session().await;
        let b = w.session().await;
        let mut ahead = NewMessage::user_text("ahead");
        ahead.id = Some(MessageId::parse("msg_fffffffff000AAAAAAAAAAAAAA").expect("id"));
        let ahead = w.rewind.create_message(&a.id, ahead).await.expect("ahead");
        let follows = w
            .rewind
            .create_message(&a.id, NewMessage::user_text("follows"))
            .await
            .expect("follows");
        assert!(follows.info.id > ahead.info.id);

        let mut top = NewMessage::user_text("top");
        top.id = Some(MessageId::parse("msg_ffffffffffffzzzzzzzzzzzzzz").expect("id"));
        let seq = w.last_seq().await;
        let refused = w.rewind.create_message(&b.id, top).await;
        assert!(
            matches!(refused, Err(Error::InvalidInput(_))),
            "{refused:?}"
        );
        assert_eq!(w.last_seq().await, seq, "nothing stored");

        let mut made = Vec::new();
        for n in 0..20 {
            made.push(
                w.rewind
                    .create_message(&b.id, NewMessage::user_text(format!("b{n}")))
                    .await
                    .expect("message")
                    .info
                    .id,
            );
        }
        assert!(made.windows(2).all(|pair| pair[0] < pair[1]), "{made:?}");
        assert!(
            made.iter().all(|id| id.clock() < ahead.info.id.clock()),
            "session b keeps the clock: {made:?}"
        );
        let stored: Vec<MessageId> = w.message_ids(&b.id).await;
        assert_eq!(stored, made);
    })
}

/// A revert to a step's start within a message, made permanent, cuts that step (and those after it) from
/// the message: the message's sums are then those of the steps it keeps, as the session's are (`cost`
/// less the cut steps', `finish` and `tokens` of the last step kept), announced by a `message.updated`
/// after the parts' removal (review, black-box: the message kept `finish: stop` and the cut step's cost
/// and tokens, and disagreed with the session).
#[test]
fn cutting_steps_from_a_message_takes_their_sums_off_it() {
    block_on(async {
        let w = World::new();
        let s = w.session().await;
        w.rewind
            .create_message(&s.id, NewMessage::user_text("go"))
            .await
            .expect("user");
        let a = w
            .rewind
            .create_message(&s.id, NewMessage::assistant())
            .await
            .expect("assistant");
        let starts = steps_each_with_text_after(
            &w,
            &s.id,
            &a.info.id,
            &[("c1", "tool-calls", 1.0, 3.0), ("c2", "stop", 2.0, 5.0)],
        )
        .await;
        w.rewind
            .revert(
                &s.id,
                rewind_core::RevertTarget {
                    message_id: a.info.id.clone(),
                    part_id: Some(starts[1].clone()),
                },
            )
            .await
            .expect("revert to the second step");
        let seq = w.last_seq().await;
        let session = w.rewind.commit_revert(&s.id).await.expect("commit");
        assert_eq!(session.cost, 1.0);
        let stored = w.rewind.message(&s.id, &a.info.id).await.expect("message");
        let info = serde_json::to_value(&stored.info).expect("json");
        assert_eq!(info["cost"].as_f64(), Some(1.0));
        assert_eq!(info["finish"], "tool-calls");
        assert_eq!(info["tokens"]["output"].as_f64(), Some(3.0));
        let types = w.event_types_after(seq).await;
        let removed = types.iter().rposition(|t| t == "message.part.removed");
        let updated = types.iter().rposition(|t| t == "message.updated");
        assert!(
            removed.is_some() && updated > removed,
            "message.updated after the parts' removal: {types:?}"
        );
    })
}

/// Records on assistant message `message` one step per `(file, reason, cost, output tokens)`, each writing
/// its file and followed by a text part, as an agent's answer has; returns the steps' start parts.
async fn steps_each_with_text_after(
    w: &World,
    session: &SessionId,
    message: &MessageId,
    steps: &[(&str, &str, f64, f64)],
) -> Vec<PartId> {
    let mut starts = Vec::new();
    for &(file, reason, cost, output) in steps {
        starts.push(
            w.rewind
                .begin_step(session, message)
                .await
                .expect("begin")
                .id,
        );
        w.write(file, file);
        w.rewind
            .finish_step(
                session,
                message,
                rewind_core::service::StepEnd {
                    reason: Some(reason.to_owned()),
                    cost: Some(cost),
                    tokens: Some(rewind_core::model::Tokens {
                        output,
                        ..Default::default()
                    }),
                },
            )
            .await
            .expect("finish");
        w.rewind
            .append_part(
                session,
                message,
                NewPart {
                    id: None,
                    body: rewind_core::model::PartBody::text("between"),
                },
            )
            .await
            .expect("text");
    }
    starts
}

/// A revert to a step's start within a message, made permanent, leaves the turn's user message the
/// `summary.diffs` of the steps the turn keeps (SPEC 4: the diff from its first step start to its last
/// step finish), announced by a `message.updated`; with no step left, an empty one (the summary kept
/// the cut steps' files, which a client shows as the turn's changes).
#[test]
fn cutting_steps_from_a_turn_makes_its_summary_of_the_steps_kept() {
    block_on(async {
        let w = World::new();
        let s = w.session().await;
        let user = w
            .rewind
            .create_message(&s.id, NewMessage::user_text("go"))
            .await
            .expect("user");
        let a = w
            .rewind
            .create_message(&s.id, NewMessage::assistant())
            .await
            .expect("assistant");
        // Text first: a revert to the first step's start then keeps the message (SPEC 5).
        w.rewind
            .append_part(
                &s.id,
                &a.info.id,
                NewPart {
                    id: None,
                    body: rewind_core::model::PartBody::text("thinking"),
                },
            )
            .await
            .expect("text");
        let starts = steps_each_with_text_after(
            &w,
            &s.id,
            &a.info.id,
            &[("c1", "tool-calls", 1.0, 3.0), ("c2", "stop", 2.0, 5.0)],
        )
        .await;
        let files = |info: &rewind_core::model::Message| -> Vec<String> {
            info.summary_diffs()
                .expect("summary.diffs")
                .into_iter()
                .map(|diff| diff.file)
                .collect()
        };
        let stored = w.rewind.message(&s.id, &user.info.id).await.expect("user");
        assert_eq!(files(&stored.info), ["c1", "c2"]);
        for (start, left) in [(1, vec!["c1"]), (0, vec![])] {
            w.rewind
                .revert(
                    &s.id,
                    rewind_core::RevertTarget {
                        message_id: a.info.id.clone(),
                        part_id: Some(starts[start].clone()),
                    },
                )
                .await
                .expect("revert to a step's start");
            let seq = w.last_seq().await;
            w.rewind.commit_revert(&s.id).await.expect("commit");
            let stored = w.rewind.message(&s.id, &user.info.id).await.expect("user");
            assert_eq!(files(&stored.info), left, "after the cut of step {start}");
            let announced: Vec<Vec<String>> = w
                .repo
                .events_after(seq, 1_000)
                .await
                .expect("events")
                .into_iter()
                .filter_map(|e| match e.event.payload {
                    rewind_core::model::EventPayload::MessageUpdated { info, .. }
                        if info.id == user.info.id =>
                    {
                        Some(files(&info))
                    }
                    _ => None,
                })
                .collect();
            assert_eq!(
                announced,
                std::slice::from_ref(&left),
                "message.updated of the user message"
            );
        }
    })
}
