//! The takeover rule of SPEC section 1, case by case: a lease whose process is gone on this host, or that
//! expired on another host or for a server, may be taken over; a live process's lease on this host never.

use rewind_core::id::IdGenerator;
use rewind_core::model::SessionId;
use rewind_core::model::{
    Holder, HolderKind, Lease, LeaseKey, LeaseToken, ProcessIdentity, may_take_over,
};

const NOW: u64 = 1_000_000;

/// A process on `host`.
fn process(host: &str) -> ProcessIdentity {
    ProcessIdentity {
        host: host.to_owned(),
        pid: 42,
        start_time: 7,
        boot: None,
        machine: None,
    }
}

fn lease(host: &str, kind: HolderKind, expires_at: u64) -> Lease {
    let session: SessionId = IdGenerator::new().descending(1);
    Lease {
        key: LeaseKey::Session(session),
        token: LeaseToken("tok".to_owned()),
        holder: Holder {
            kind,
            process: ProcessIdentity {
                host: host.to_owned(),
                pid: 42,
                start_time: 7,
                boot: None,
                machine: None,
            },
        },
        expires_at,
    }
}

#[test]
fn takeover_rule_table() {
    let expired = NOW - 1;
    let valid = NOW + 60_000;
    // (case, holder host, kind, expires, holder alive, expected)
    let cases = [
        (
            "live process on this host, expired",
            "here",
            HolderKind::Process,
            expired,
            true,
            false,
        ),
        (
            "live process on this host, valid",
            "here",
            HolderKind::Process,
            valid,
            true,
            false,
        ),
        (
            "dead process on this host, valid",
            "here",
            HolderKind::Process,
            valid,
            false,
            true,
        ),
        (
            "dead process on this host, expired",
            "here",
            HolderKind::Process,
            expired,
            false,
            true,
        ),
        (
            "live server on this host, expired",
            "here",
            HolderKind::Server,
            expired,
            true,
            true,
        ),
        (
            "live server on this host, valid",
            "here",
            HolderKind::Server,
            valid,
            true,
            false,
        ),
        (
            "process on another host, expired",
            "there",
            HolderKind::Process,
            expired,
            true,
            true,
        ),
        (
            "process on another host, valid",
            "there",
            HolderKind::Process,
            valid,
            true,
            false,
        ),
        (
            "server on another host, valid",
            "there",
            HolderKind::Server,
            valid,
            true,
            false,
        ),
        (
            "lease expiring exactly now",
            "there",
            HolderKind::Process,
            NOW,
            true,
            true,
        ),
    ];
    for (name, host, kind, expires, alive, expected) in cases {
        let got = may_take_over(&lease(host, kind, expires), NOW, &process("here"), |_| {
            alive
        });
        assert_eq!(got, expected, "{name}");
    }
}

#[test]
fn liveness_is_asked_only_about_this_hosts_processes() {
    // Another host's process cannot be checked from here: its liveness answer must not matter.
    let other = lease("there", HolderKind::Process, NOW + 1);
    assert!(!may_take_over(&other, NOW, &process("here"), |_| false));
    // Nor about a process of a host of the same name on another machine (or pid namespace): that one is
    // another host, taken over only once expired.
    let mut namesake = lease("here", HolderKind::Process, NOW + 1);
    namesake.holder.process.machine = Some("m2/pid:[1]".to_owned());
    let mut here = process("here");
    here.machine = Some("m1/pid:[1]".to_owned());
    assert!(!may_take_over(&namesake, NOW, &here, |_| false));
    namesake.expires_at = NOW;
    assert!(may_take_over(&namesake, NOW, &here, |_| true));
    // One written before machines were recorded: judged by its host name, as before.
    namesake.holder.process.machine = None;
    namesake.expires_at = NOW + 1;
    assert!(may_take_over(&namesake, NOW, &here, |_| false));
}

/// Holders are stored as JSON: one written before boot ids were recorded reads back without one, and is
/// written back the same.
#[test]
fn a_holder_stored_before_boot_ids_reads_without_one() {
    let old = r#"{"host":"h","pid":4,"startTime":9}"#;
    let process: ProcessIdentity = serde_json::from_str(old).expect("decodes");
    assert_eq!(process.boot, None);
    assert_eq!(serde_json::to_string(&process).expect("encodes"), old);
    let with_boot = ProcessIdentity {
        boot: Some("b00t".to_owned()),
        ..process
    };
    let json = serde_json::to_string(&with_boot).expect("encodes");
    assert_eq!(json, r#"{"host":"h","pid":4,"startTime":9,"boot":"b00t"}"#);
}
