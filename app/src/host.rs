//! The real `HostPort`: the system clock, and the process table read from `/proc` (Linux), so a lease's
//! owner is known to be gone when its pid no longer runs with the start time it had.

use std::time::{SystemTime, UNIX_EPOCH};

use rewind_core::HostPort;
use rewind_core::model::ProcessIdentity;

/// The host rewind runs on.
#[derive(Debug, Clone)]
pub struct SystemHost {
    me: ProcessIdentity,
}

impl SystemHost {
    /// This process on this host.
    pub fn new() -> SystemHost {
        let pid = std::process::id();
        SystemHost {
            me: ProcessIdentity {
                host: host_name(),
                pid,
                start_time: process_start_time(pid).unwrap_or(0),
                boot: boot_id(),
                machine: machine(),
            },
        }
    }
}

impl Default for SystemHost {
    fn default() -> Self {
        SystemHost::new()
    }
}

impl HostPort for SystemHost {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }

    fn this_process(&self) -> ProcessIdentity {
        self.me.clone()
    }

    fn is_alive(&self, process: &ProcessIdentity) -> bool {
        if !process.same_host(&self.me) {
            // Another host's process table (or another pid namespace's) cannot be read: it is alive until
            // its lease expires.
            return true;
        }
        // A process of an earlier boot is gone, whatever runs under its pid now.
        if let (Some(then), Some(now)) = (&process.boot, &self.me.boot)
            && then != now
        {
            return false;
        }
        match read_stat(process.pid) {
            // A zombie has exited; only its parent has not collected it yet.
            Some(stat) => stat.state != 'Z' && stat.start_time == process.start_time,
            // Not in `/proc`: gone, unless the kernel says the pid runs (`/proc` mounted with `hidepid`
            // hides other users' processes). Its start time cannot be read then; it counts as alive. (A
            // pid that is no process's, 0 or past `i32`, would name a group to `kill`.)
            None => i32::try_from(process.pid)
                .ok()
                .filter(|&pid| pid > 0)
                .is_some_and(|pid| {
                    !matches!(
                        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
                        Err(nix::errno::Errno::ESRCH)
                    )
                }),
        }
    }
}

/// This machine and pid namespace (`ProcessIdentity::machine`): `/etc/machine-id` (or D-Bus's copy) and
/// the namespace `/proc/self/ns/pid` names, when either can be read.
pub fn machine() -> Option<String> {
    let id = ["/etc/machine-id", "/var/lib/dbus/machine-id"]
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok())
        .map(|id| id.trim().to_owned())
        .filter(|id| !id.is_empty());
    let namespace = std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .map(|link| link.to_string_lossy().into_owned());
    if id.is_none() && namespace.is_none() {
        return None;
    }
    Some(format!(
        "{}/{}",
        id.unwrap_or_default(),
        namespace.unwrap_or_default()
    ))
}

/// This boot of the host (`/proc/sys/kernel/random/boot_id`), when the kernel tells.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|id| id.trim().to_owned())
        .filter(|id| !id.is_empty())
}

/// The host's name (`/proc/sys/kernel/hostname`, else `HOSTNAME`, else `localhost`).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .or_else(|| {
            std::env::var("HOSTNAME")
                .ok()
                .filter(|name| !name.is_empty())
        })
        .unwrap_or_else(|| "localhost".to_owned())
}

/// A process's start time in clock ticks since boot, `None` when it does not run.
pub fn process_start_time(pid: u32) -> Option<u64> {
    read_stat(pid).map(|stat| stat.start_time)
}

struct ProcStat {
    state: char,
    start_time: u64,
}

fn read_stat(pid: u32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may itself hold spaces and parentheses: the
    // fields after it start after the last `)`.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state); starttime is field 22.
    let state = fields.first()?.chars().next()?;
    let start_time = fields.get(22 - 3)?.parse().ok()?;
    Some(ProcStat { state, start_time })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_changed_start_time_is_not() {
        let host = SystemHost::new();
        let me = host.this_process();
        assert!(me.start_time > 0);
        assert!(host.is_alive(&me));
        let reused = ProcessIdentity {
            start_time: me.start_time + 1,
            ..me.clone()
        };
        assert!(!host.is_alive(&reused));
        // This very pid and start time, in an earlier boot: gone (it only looks like this process).
        assert!(me.boot.is_some(), "Linux tells the boot id");
        let earlier_boot = ProcessIdentity {
            boot: Some("00000000-0000-0000-0000-000000000000".to_owned()),
            ..me.clone()
        };
        assert!(!host.is_alive(&earlier_boot));
        // A lease written before boot ids were recorded is judged by pid and start time.
        let unknown_boot = ProcessIdentity {
            boot: None,
            ..me.clone()
        };
        assert!(host.is_alive(&unknown_boot));
        let elsewhere = ProcessIdentity {
            host: format!("{}-elsewhere", me.host),
            pid: u32::MAX,
            ..me.clone()
        };
        assert!(host.is_alive(&elsewhere));
        // Another machine of the same name (or a container sharing the host's name, in its own pid
        // namespace): its pid cannot be looked up here, so it is alive until its lease expires, even when
        // no such pid runs here and its boot is not this one.
        assert!(me.machine.is_some(), "Linux names the pid namespace");
        let namesake = ProcessIdentity {
            machine: Some("another-machine/pid:[1]".to_owned()),
            pid: u32::MAX,
            boot: Some("00000000-0000-0000-0000-000000000000".to_owned()),
            ..me.clone()
        };
        assert!(host.is_alive(&namesake));
        // One written before machines were recorded is judged by its host name, as before.
        let unknown_machine = ProcessIdentity {
            machine: None,
            pid: u32::MAX,
            ..me
        };
        assert!(!host.is_alive(&unknown_machine));
    }

    #[test]
    fn an_exited_child_is_gone() -> std::io::Result<()> {
        let host = SystemHost::new();
        let mut child = std::process::Command::new("true").spawn()?;
        let identity = ProcessIdentity {
            host: host_name(),
            pid: child.id(),
            start_time: process_start_time(child.id()).unwrap_or(0),
            boot: None,
            machine: None,
        };
        child.wait()?;
        assert!(!host.is_alive(&identity));
        Ok(())
    }
}
